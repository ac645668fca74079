"""Drive `fusebox serve`'s `/mcp` (in front of the stdio orders server) with
the official MCP Python SDK and the `openai-agents` SDK:
  mcp client session   ClientSession: list the tools, call get_order, end the session
  agents mcp server    MCPServerStreamableHttp: list the tools, call get_order
  agent run with mcp   an Agent whose model is the gateway's and whose tools
                       are the MCP server's, run to completion
Env: FUSEBOX_BASE_URL (e.g. http://127.0.0.1:8787). Prints `ok <check>` per pass.
"""
import asyncio
import logging
import sys
import traceback

from agents import Agent, Runner, set_default_openai_api, set_default_openai_client, set_tracing_disabled
from agents.mcp import MCPServerStreamableHttp
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from openai import AsyncOpenAI

from _wire import BASE_URL, async_client

MCP_URL = f"{BASE_URL}/mcp"
warnings = []


class Remember(logging.Handler):
    """Keeps what the SDKs warn of: a clean session warns of nothing."""

    def emit(self, record):
        warnings.append(record.getMessage())


logging.getLogger().addHandler(Remember(level=logging.WARNING))


def shipped(result, order):
    assert not result.is_error, f"isError: {result}"
    text = " ".join(c.text for c in result.content if getattr(c, "type", "") == "text")
    assert f'"{order}": shipped' in text, f"unexpected answer: {text!r}"


async def client_session():
    async with streamable_http_client(MCP_URL) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            names = [t.name for t in (await session.list_tools()).tools]
            assert names == ["get_order", "crash", "environment"], names
            shipped(await session.call_tool("get_order", {"order_id": "38100"}), "38100")


async def agents_mcp_server():
    async with MCPServerStreamableHttp(params={"url": MCP_URL}, name="orders") as orders:
        names = [t.name for t in await orders.list_tools()]
        assert names == ["get_order", "crash", "environment"], names
        shipped(await orders.call_tool("get_order", {"order_id": "38101"}), "38101")


async def agent_run():
    set_default_openai_client(
        AsyncOpenAI(base_url=f"{BASE_URL}/v1", api_key="unused", http_client=async_client(), max_retries=0),
        use_for_tracing=False,
    )
    set_tracing_disabled(True)
    set_default_openai_api("chat_completions")
    async with MCPServerStreamableHttp(params={"url": MCP_URL}, name="orders") as orders:
        agent = Agent(name="support", instructions="Answer questions about orders; use get_order.",
                      mcp_servers=[orders], model="default")
        # The mock providers call a tool on most first turns: a few orders, until one did.
        for n in range(38102, 38112):
            result = await Runner.run(agent, f"Where is order #{n}?", max_turns=8)
            assert isinstance(result.final_output, str) and result.final_output
            outputs = [i.output for i in result.new_items if type(i).__name__ == "ToolCallOutputItem"]
            if outputs:
                assert all("shipped" in str(o) for o in outputs), f"a tool call failed: {outputs}"
                print(f"   tool outputs {outputs}, final_output={result.final_output!r}")
                return
    raise AssertionError("the agent never called an MCP tool")


async def main():
    failed = []
    for name, check in [("mcp client session", client_session), ("agents mcp server", agents_mcp_server),
                        ("agent run with mcp", agent_run)]:
        try:
            warnings.clear()
            await check()
            assert not warnings, f"the SDK warned: {warnings}"
            print(f"ok {name}")
        except Exception as e:
            failed.append(name)
            print(f"FAIL {name}: {type(e).__name__}: {e}", file=sys.stderr)
            traceback.print_exc(limit=3)
    return failed


failed = asyncio.run(main())
if failed:
    sys.exit(f"failed: {', '.join(failed)}")
