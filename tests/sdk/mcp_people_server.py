"""A stdio MCP server (the official Python SDK) that asks its client things
back and tells it things, for `mcp_people.py` to drive through fusebox:
  ask_person(question)   elicits a `name`; answers with it and the action
  summarise(text)        asks the client for a sampled message; answers with it
  steps(n)               n log messages and n progress notifications, then "done"
  people://greeting      a resource
  people://user/{id}     a resource template
  greet(name)            a prompt
"""
import warnings

from pydantic import BaseModel

from mcp import types
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning

# Sampling and logging are deprecated by the 2026-07-28 protocol but still spoken.
warnings.simplefilter("ignore", MCPDeprecationWarning)

server = MCPServer("people")


class Person(BaseModel):
    name: str


@server.tool()
async def ask_person(question: str, ctx: Context) -> str:
    """Asks the user for a name, and says what they answered."""
    answer = await ctx.elicit(question, Person)
    name = answer.data.name if answer.action == "accept" else ""
    return f"action={answer.action} name={name}"


@server.tool()
async def summarise(text: str, ctx: Context) -> str:
    """Asks the client's model for a summary of `text`."""
    result = await ctx.session.create_message(
        [types.SamplingMessage(role="user", content=types.TextContent(type="text", text=f"Summarise: {text}"))],
        max_tokens=64,
        related_request_id=ctx.request_id,
    )
    content = result.content
    return content.text if isinstance(content, types.TextContent) else f"not text: {content!r}"


@server.tool()
async def steps(n: int, ctx: Context) -> str:
    """Logs n messages and reports n steps of progress, then says done."""
    for i in range(1, n + 1):
        await ctx.info(f"step {i} of {n}")
        await ctx.report_progress(i, n, f"step {i}")
    return "done"


@server.resource("people://greeting", mime_type="text/plain")
def greeting() -> str:
    return "hello from people"


@server.resource("people://user/{id}", mime_type="text/plain")
def user(id: str) -> str:
    return f"user {id}"


@server.prompt()
def greet(name: str) -> str:
    """Greets someone."""
    return f"Please greet {name} warmly."


if __name__ == "__main__":
    server.run()
