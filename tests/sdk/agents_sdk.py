"""Drive `fusebox serve` with the `openai-agents` SDK: one Agent with a get_order
function tool, run to completion in both of the SDK's API modes:
  responses         (the SDK default: POST /v1/responses)
  chat_completions  (POST /v1/chat/completions)
Each mode is reported on its own; the script exits non-zero if either failed.
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


async def run(api):
    set_default_openai_api(api)
    tool_calls.clear()
    result = await Runner.run(agent, "Where is order #38100?", max_turns=8)
    out = result.final_output
    assert isinstance(out, str) and out, f"final_output is not a non-empty string: {out!r}"
    print(f"   {api}: tool calls {tool_calls}, final_output={out!r}")


failed = []
for api in ["responses", "chat_completions"]:
    try:
        asyncio.run(run(api))
        print(f"ok agent run ({api})")
    except Exception as e:
        failed.append(api)
        print(f"FAIL agent run ({api}): {type(e).__name__}: {e}", file=sys.stderr)
        traceback.print_exc(limit=3)
        dump_last()
if failed:
    sys.exit(f"failed modes: {', '.join(failed)}")
