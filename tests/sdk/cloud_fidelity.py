"""What a client sends and is told beyond plain text, through fusebox to a
cloud provider's strict fake, with the official OpenAI and Anthropic SDKs:
an image, structured output (FUSEBOX_STRUCTURED=1: the provider has it), a
tool call's id, arguments and finish reason, the result's answer, usage;
embeddings of FUSEBOX_DIMENSIONS values, in the SDK's default base64 and as
floats. Env: FUSEBOX_BASE_URL (the gateway). Prints `ok <check>` per pass.
"""
import json
import os

import anthropic
from openai import OpenAI

from _wire import BASE_URL, run_checks, sync_client

oa = OpenAI(base_url=f"{BASE_URL}/v1", api_key="unused", http_client=sync_client(), max_retries=0)
an = anthropic.Anthropic(base_url=BASE_URL, api_key="unused", max_retries=0)
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
TOOLS = [{"type": "function", "function": {
    "name": "get_order", "description": "Look up an order's shipping status by id.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"],
                   "additionalProperties": False}}}]
ASK = [{"role": "user", "content": "Where is order #38100?"}]


def image():
    r = oa.chat.completions.create(model="default", messages=[{"role": "user", "content": [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]}])
    c = r.choices[0]
    assert c.message.content and c.finish_reason == "stop", r
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (25, 12, 37), r.usage


def structured():
    schema = {"type": "object", "properties": {"order_id": {"type": "string"}, "status": {"type": "string"}},
              "required": ["order_id", "status"], "additionalProperties": False}
    r = oa.chat.completions.create(model="default", messages=ASK, response_format={
        "type": "json_schema", "json_schema": {"name": "order", "schema": schema, "strict": True}})
    got = json.loads(r.choices[0].message.content)
    assert got == {"order_id": "38100", "status": "in transit"}, got


def openai_tool_call():
    r = oa.chat.completions.create(model="default", messages=ASK, tools=TOOLS)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.tool_calls, r
    call = c.message.tool_calls[0]
    assert call.id and call.function.name == "get_order" and json.loads(call.function.arguments) == {"order_id": "38100"}, call
    messages = ASK + [c.message.model_dump(exclude_none=True),
                      {"role": "tool", "tool_call_id": call.id, "content": "in transit"}]
    r = oa.chat.completions.create(model="default", messages=messages, tools=TOOLS)
    assert r.choices[0].finish_reason == "stop", r
    assert r.choices[0].message.content == "The order service says: in transit", r


def anthropic_tool_use():
    tools = [{"name": "get_order", "description": "Look up an order.",
              "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}}}]
    ask = [{"role": "user", "content": "Where is order #38100?"}]
    m = an.messages.create(model="default", max_tokens=256, messages=ask, tools=tools)
    assert m.stop_reason == "tool_use" and (m.usage.input_tokens, m.usage.output_tokens) == (25, 12), m
    use = next(b for b in m.content if b.type == "tool_use")
    assert use.name == "get_order" and use.input == {"order_id": "38100"}, use
    ask += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "in transit"}]}]
    m = an.messages.create(model="default", max_tokens=256, messages=ask, tools=tools)
    assert m.stop_reason == "end_turn" and m.content[0].text == "The order service says: in transit", m


def embeddings():
    dims = int(os.environ["FUSEBOX_DIMENSIONS"])
    r = oa.embeddings.create(model="cloud-embed", input=["where is my order", "refund"], dimensions=dims)
    assert [len(d.embedding) for d in r.data] == [dims, dims] and r.usage.prompt_tokens > 0, r
    r = oa.embeddings.create(model="cloud-embed", input="refund", dimensions=dims, encoding_format="float")
    assert len(r.data[0].embedding) == dims and all(isinstance(x, float) for x in r.data[0].embedding), r


checks = [("image", image), ("openai tool call", openai_tool_call), ("anthropic tool use", anthropic_tool_use)]
if os.environ.get("FUSEBOX_STRUCTURED") == "1":
    checks.append(("structured output", structured))
checks.append(("embeddings", embeddings))
run_checks(checks)
