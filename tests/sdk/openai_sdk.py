"""Drive `fusebox serve` with the official `openai` Python SDK (chat completions).

Checks: /v1/models lists `default`, plain completion + fusebox headers, streaming with usage, a tool offer,
a real multi-turn tool loop, and a streamed tool call.
Env: FUSEBOX_BASE_URL (e.g. http://127.0.0.1:8787). Prints `ok <check>` per pass.
"""
import json

from openai import OpenAI

from _wire import BASE_URL, run_checks, sync_client

client = OpenAI(base_url=f"{BASE_URL}/v1", api_key="unused", http_client=sync_client(), max_retries=0)
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_order",
        "description": "Look up an order's shipping status by id.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
    },
}]


def ask(n=38100):
    return [{"role": "user", "content": f"Where is order #{n}?"}]


def check_tool_call(name, arguments):
    assert name == "get_order", f"tool call names {name!r}, not get_order"
    args = json.loads(arguments)  # raises if the arguments are not JSON
    assert "order_id" in args, f"tool arguments lack order_id: {arguments!r}"


def models_list():
    ids = [m.id for m in client.models.list()]
    assert "default" in ids, f"route `default` not in /v1/models: {ids}"
    print(f"   models={ids}")


def plain():
    raw = client.chat.completions.with_raw_response.create(model="default", messages=ask())
    level, chain = raw.headers.get("x-fusebox-level"), raw.headers.get("x-fusebox-chain")
    assert level, f"no x-fusebox-level header: {dict(raw.headers)}"
    assert chain, f"no x-fusebox-chain header: {dict(raw.headers)}"
    content = raw.parse().choices[0].message.content
    assert content, f"empty content: {raw.parse()}"
    print(f"   level={level} chain={chain!r} content={content!r}")


def stream_with_usage():
    text, last = "", None
    for chunk in client.chat.completions.create(model="default", messages=ask(), stream=True,
                                                stream_options={"include_usage": True}):
        last = chunk
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    assert text, "stream produced no content deltas"
    assert last is not None and last.usage is not None, f"last chunk has no usage: {last}"
    print(f"   text={text!r} usage={last.usage.total_tokens} tokens")


def tool_offer():
    msg = client.chat.completions.create(model="default", messages=ask(), tools=TOOLS).choices[0].message
    for call in msg.tool_calls or []:
        check_tool_call(call.function.name, call.function.arguments)
    print(f"   tool_calls={len(msg.tool_calls or [])} content={msg.content!r}")


def tool_loop():
    calls_seen = 0
    for n in range(38100, 38105):  # different questions: the mock providers call tools on most
        messages = ask(n)
        for _turn in range(6):
            resp = client.chat.completions.create(model="default", messages=messages, tools=TOOLS)
            msg = resp.choices[0].message
            if not msg.tool_calls:
                break
            messages.append(msg.model_dump(exclude_none=True))
            for call in msg.tool_calls:
                check_tool_call(call.function.name, call.function.arguments)
                calls_seen += 1
                messages.append({"role": "tool", "tool_call_id": call.id,
                                 "content": json.dumps({"status": "shipped", "eta_days": 2})})
        assert msg.content and not msg.tool_calls, f"no text answer after 6 turns: {msg}"
        if calls_seen:
            print(f"   order #{n}: {calls_seen} tool call(s), then {msg.content!r}")
            return
    raise AssertionError("5 questions and the model never called get_order")


def stream_tool_call():
    for n in range(38100, 38105):
        calls = {}  # index -> [name, arguments]
        for chunk in client.chat.completions.create(model="default", messages=ask(n), tools=TOOLS, stream=True):
            for d in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                c = calls.setdefault(d.index, ["", ""])
                c[0] += (d.function and d.function.name) or ""
                c[1] += (d.function and d.function.arguments) or ""
        for name, arguments in calls.values():
            check_tool_call(name, arguments)
        if calls:
            print(f"   order #{n}: streamed {list(calls.values())}")
            return
    raise AssertionError("5 streamed questions and the model never called get_order")


run_checks([
    ("models list", models_list),
    ("plain completion + headers", plain),
    ("stream with usage", stream_with_usage),
    ("tool offer", tool_offer),
    ("tool loop", tool_loop),
    ("streamed tool call", stream_tool_call),
])
