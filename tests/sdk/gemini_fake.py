"""The strict fake's Gemini API as Google's official `google-genai` SDK calls
it: a quota error with its retry delay, plain, streamed, a tool loop that
sends the model's call back with its thought signature (and is refused
without it), the v1 path, and an invalid key refused as Google refuses it.
Env: FUSEBOX_BASE_URL (the fake's root). Prints `ok <check>` per pass.
"""
from google import genai
from google.genai import errors, types

from _wire import BASE_URL, run_checks

MODEL = "gemini-2.5-flash"
NO_RETRY = types.HttpRetryOptions(attempts=1)


def client(key="gemini-key", version="v1beta"):
    opts = types.HttpOptions(base_url=BASE_URL, api_version=version, retry_options=NO_RETRY)
    return genai.Client(api_key=key, http_options=opts)


beta = client()
TOOLS = [types.Tool(function_declarations=[types.FunctionDeclaration(
    name="get_order",
    description="Look up an order's shipping status by id.",
    parameters_json_schema={"type": "object", "properties": {"order_id": {"type": "string"}},
                            "required": ["order_id"], "additionalProperties": False},
)])]
TOOL_CONFIG = types.GenerateContentConfig(
    tools=TOOLS, automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
ASK = types.Content(role="user", parts=[types.Part(text="Where is order #38100?")])


def quota():
    try:
        beta.models.generate_content(model=MODEL, contents="hello")
    except errors.ClientError as e:
        assert e.code == 429 and e.status == "RESOURCE_EXHAUSTED", (e.code, e.status)
        delays = [d.get("retryDelay") for d in e.details["error"]["details"]]
        assert "7s" in delays, e.details
        return
    raise AssertionError("no quota error")


def plain():
    r = beta.models.generate_content(model=MODEL, contents="Where is order #38100?",
                                     config=types.GenerateContentConfig(system_instruction="Be brief.", temperature=0.2,
                                                                        max_output_tokens=200))
    assert r.text and r.text.startswith("Order 38100"), r
    assert r.usage_metadata.total_token_count == 37, r.usage_metadata
    assert r.candidates[0].finish_reason == types.FinishReason.STOP


def streamed():
    text, last = "", None
    for chunk in beta.models.generate_content_stream(model=MODEL, contents="Where is order #38100?"):
        last = chunk
        text += chunk.text or ""
    assert text.startswith("Order 38100") and text.endswith("two days."), text
    assert last.candidates[0].finish_reason == types.FinishReason.STOP, last
    assert last.usage_metadata.candidates_token_count == 12, last.usage_metadata


def called():
    r = beta.models.generate_content(model=MODEL, contents=[ASK], config=TOOL_CONFIG)
    calls = r.function_calls
    assert calls and calls[0].name == "get_order" and calls[0].args == {"order_id": "38100"}, r
    return r.candidates[0].content


def tool_loop():
    turn = called()
    assert turn.parts[0].thought_signature, "the call carries no signature"
    answer = types.Content(role="user", parts=[
        types.Part.from_function_response(name="get_order", response={"result": "in transit, two days"})])
    r = beta.models.generate_content(model=MODEL, contents=[ASK, turn, answer], config=TOOL_CONFIG)
    assert r.text == "The order service says: in transit, two days", r.text


def unsigned_refused():
    turn = called()
    turn.parts[0].thought_signature = None
    answer = types.Content(role="user", parts=[
        types.Part.from_function_response(name="get_order", response={"result": "x"})])
    try:
        beta.models.generate_content(model=MODEL, contents=[ASK, turn, answer], config=TOOL_CONFIG)
    except errors.ClientError as e:
        assert e.code == 400 and "thought_signature" in e.message, (e.code, e.message)
        return
    raise AssertionError("a call sent back without its signature was answered")


def v1():
    c = client(version="v1")  # kept: a client collected closes its connections
    r = c.models.generate_content(model=MODEL, contents="Where is order #38100?")
    assert r.text.startswith("Order 38100"), r


def invalid_key():
    c = client(key="invalid-key")
    try:
        c.models.generate_content(model=MODEL, contents="hello")
    except errors.ClientError as e:
        assert e.code == 400 and e.status == "INVALID_ARGUMENT", (e.code, e.status)
        return
    raise AssertionError("an invalid key was answered")


run_checks([
    ("quota error with its retry delay", quota),
    ("plain", plain),
    ("streamed", streamed),
    ("tool loop", tool_loop),
    ("call without its signature refused", unsigned_refused),
    ("v1 path", v1),
    ("invalid key refused", invalid_key),
])
