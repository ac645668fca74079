"""Drive `fusebox serve` with the `openai-agents` SDK: one Agent with a get_order
function tool, run to completion in both of the SDK's API modes:
  responses         (the SDK default: POST /v1/responses)
  chat_completions  (POST /v1/chat/completions)
(the responses mode also streamed, as Runner.run_streamed does). Each is
reported on its own; the script exits non-zero if any failed.
Env: FUSEBOX_BASE_URL (e.g. http://127.0.0.1:8787). Prints `ok <check>` per pass.
"""
import asyncio
import sys
import traceback

from agents import (Agent, Runner, function_tool, set_default_openai_api,
                    set_default_openai_client, set_tracing_disabled)
from openai import AsyncOpenAI

from _wire import BASE_URL, async_client, dump_last

set_default_openai_client(
    AsyncOpenAI(base_url=f"{BASE_URL}/v1", api_key="unused", http_client=async_client(), max_retries=0),
    use_for_tracing=False,
)
set_tracing_disabled(True)
tool_calls = []


@function_tool
def get_order(order_id: str) -> str:
    """Look up an order's shipping status by id."""
    tool_calls.append(order_id)
    return f"Order {order_id}: shipped, arrives in 2 days."


agent = Agent(name="support", instructions="Answer questions about orders; use get_order.",
              tools=[get_order], model="default")


async def run(api, streamed=False):
    """Runs the agent on a few orders: every run must finish with text, and
    the model (the mock providers call tools on most first turns) must have
    used the tool on at least one."""
    set_default_openai_api(api)
    tool_calls.clear()
    for n in range(38100, 38105):
        if streamed:
            result = Runner.run_streamed(agent, f"Where is order #{n}?", max_turns=8)
            async for _ in result.stream_events():
                pass
        else:
            result = await Runner.run(agent, f"Where is order #{n}?", max_turns=8)
        out = result.final_output
        assert isinstance(out, str) and out, f"final_output is not a non-empty string: {out!r}"
        if tool_calls:
            break
    assert tool_calls, "the agent never called its tool"
    print(f"   {api}{' streamed' if streamed else ''}: tool calls {tool_calls}, final_output={out!r}")


async def main():
    # One event loop for both modes: the client's connection pool belongs to it.
    failed = []
    for api, streamed in [("responses", False), ("responses", True), ("chat_completions", False)]:
        name = f"{api}{', streamed' if streamed else ''}"
        try:
            await run(api, streamed)
            print(f"ok agent run ({name})")
        except Exception as e:
            failed.append(name)
            print(f"FAIL agent run ({name}): {type(e).__name__}: {e}", file=sys.stderr)
            traceback.print_exc(limit=3)
            dump_last()
    return failed


failed = asyncio.run(main())
if failed:
    sys.exit(f"failed modes: {', '.join(failed)}")
