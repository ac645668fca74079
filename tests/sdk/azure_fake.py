"""The mock server's Azure OpenAI routes as the official `openai` SDK's Azure
clients call them: `AzureOpenAI` (deployment URLs, `api-version`, `api-key`)
and `OpenAI` at the v1 API (`/openai/v1/`). Plain, streamed with usage, and a
tool call, embeddings; a deployment URL without an api-version is refused as Azure
refuses it.
Env: FUSEBOX_BASE_URL (the mock server's root). Prints `ok <check>` per pass.
"""
import json

import openai
from openai import AzureOpenAI, OpenAI

from _wire import BASE_URL, run_checks, sync_client

DEPLOYMENT = "prod-gpt-4o"
deployments = AzureOpenAI(azure_endpoint=BASE_URL, api_version="2024-10-21", api_key="azure-key",
                          http_client=sync_client(), max_retries=0)
v1 = OpenAI(base_url=f"{BASE_URL}/openai/v1/", api_key="azure-key", http_client=sync_client(), max_retries=0)
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_order",
        "description": "Look up an order's shipping status by id.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
    },
}]
ASK = [{"role": "user", "content": "Where is order #38100?"}]


def plain(client):
    def check():
        r = client.chat.completions.create(model=DEPLOYMENT, messages=ASK)
        assert r.choices[0].message.content, f"empty content: {r}"
        assert r.usage and r.usage.total_tokens > 0, f"no usage: {r}"
    return check


def streamed(client):
    def check():
        text, last = "", None
        for chunk in client.chat.completions.create(model=DEPLOYMENT, messages=ASK, stream=True,
                                                    stream_options={"include_usage": True}):
            last = chunk
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
        assert text, "no content deltas"
        assert last is not None and last.usage is not None, f"last chunk has no usage: {last}"
    return check


def tool_call(client):
    def check():
        # The mock calls a tool for most questions, not for every one.
        for n in range(38100, 38110):
            ask = [{"role": "user", "content": f"Where is order #{n}?"}]
            r = client.chat.completions.create(model=DEPLOYMENT, messages=ask, tools=TOOLS)
            calls = r.choices[0].message.tool_calls
            if calls:
                assert calls[0].function.name in ("get_order", "lookup_order", "search_kb"), calls
                json.loads(calls[0].function.arguments)
                return
        raise AssertionError("no tool call in ten questions")
    return check


def embeddings(client):
    def check():
        r = client.embeddings.create(model="prod-embed", input=["where is my order", "refund"])
        assert len(r.data) == 2 and len(r.data[0].embedding) > 0, f"no vectors: {r}"
    return check


def no_api_version():
    bare = OpenAI(base_url=f"{BASE_URL}/openai/deployments/{DEPLOYMENT}/", api_key="k", max_retries=0,
                  default_headers={"api-key": "azure-key"})
    try:
        bare.chat.completions.create(model=DEPLOYMENT, messages=ASK)
    except openai.NotFoundError:
        return
    raise AssertionError("a deployment URL without an api-version was answered")


def no_key():
    # The SDK sends no call without a key: sent bare.
    url = f"{BASE_URL}/openai/deployments/{DEPLOYMENT}/chat/completions?api-version=2024-10-21"
    r = sync_client().post(url, json={"messages": ASK})
    assert r.status_code == 401, f"a call without a key was answered {r.status_code}: {r.text}"


run_checks([
    ("deployments plain", plain(deployments)),
    ("deployments streamed", streamed(deployments)),
    ("deployments tool call", tool_call(deployments)),
    ("v1 plain", plain(v1)),
    ("v1 streamed", streamed(v1)),
    ("v1 tool call", tool_call(v1)),
    ("deployments embeddings", embeddings(deployments)),
    ("v1 embeddings", embeddings(v1)),
    ("no api-version refused", no_api_version),
    ("no key refused", no_key),
])
