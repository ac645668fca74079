"""Drive `fusebox serve` with the official `anthropic` Python SDK (/v1/messages).

Checks: plain message, streamed message (text deltas + final message), and a real
multi-turn tool_use -> tool_result loop; plus a streamed tool_use.
Env: FUSEBOX_BASE_URL (e.g. http://127.0.0.1:8787). Prints `ok <check>` per pass.
"""
from anthropic import Anthropic

from _wire import BASE_URL, run_checks, sync_client

client = Anthropic(base_url=BASE_URL, api_key="unused", http_client=sync_client(), max_retries=0)
TOOLS = [{
    "name": "get_order",
    "description": "Look up an order's shipping status by id.",
    "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
}]


def ask(n=38100):
    return [{"role": "user", "content": f"Where is order #{n}?"}]


def text_of(message):
    return "".join(b.text for b in message.content if b.type == "text")


def plain():
    msg = client.messages.create(model="default", max_tokens=200, messages=ask())
    assert text_of(msg), f"no text content: {msg}"
    print(f"   stop_reason={msg.stop_reason} text={text_of(msg)!r}")


def streamed():
    deltas = []
    with client.messages.stream(model="default", max_tokens=200, messages=ask()) as stream:
        for text in stream.text_stream:
            deltas.append(text)
        final = stream.get_final_message()
    assert deltas and "".join(deltas), "stream yielded no text deltas"
    assert text_of(final) == "".join(deltas), f"final message {text_of(final)!r} != deltas {''.join(deltas)!r}"
    print(f"   {len(deltas)} deltas, stop_reason={final.stop_reason} text={text_of(final)!r}")


def tool_loop():
    uses = 0
    for n in range(38100, 38105):  # different questions: the mock providers call tools on most
        messages = ask(n)
        for _turn in range(6):
            msg = client.messages.create(model="default", max_tokens=200, messages=messages, tools=TOOLS)
            if msg.stop_reason != "tool_use":
                break
            calls = [b for b in msg.content if b.type == "tool_use"]
            assert calls, f"stop_reason tool_use but no tool_use block: {msg}"
            messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]})
            results = []
            for b in calls:
                assert b.name == "get_order" and "order_id" in b.input, f"unexpected tool_use: {b}"
                uses += 1
                results.append({"type": "tool_result", "tool_use_id": b.id, "content": "shipped, arrives in 2 days"})
            messages.append({"role": "user", "content": results})
        assert msg.stop_reason != "tool_use" and text_of(msg), f"no text answer after 6 turns: {msg}"
        if uses:
            print(f"   order #{n}: {uses} tool_use(s), then {text_of(msg)!r}")
            return
    raise AssertionError("5 questions and the model never used get_order")


def streamed_tool_use():
    for n in range(38100, 38105):
        with client.messages.stream(model="default", max_tokens=200, messages=ask(n), tools=TOOLS) as stream:
            final = stream.get_final_message()
        calls = [b for b in final.content if b.type == "tool_use"]
        for b in calls:
            assert b.name == "get_order" and "order_id" in b.input, f"unexpected tool_use: {b}"
        if calls:
            assert final.stop_reason == "tool_use", f"tool_use blocks but stop_reason={final.stop_reason}"
            print(f"   order #{n}: streamed {[(b.name, b.input) for b in calls]}")
            return
    raise AssertionError("5 streamed questions and the model never used get_order")


run_checks([
    ("plain message", plain),
    ("streamed message", streamed),
    ("tool_use loop", tool_loop),
    ("streamed tool_use", streamed_tool_use),
])
