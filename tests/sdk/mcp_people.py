"""Two MCP client sessions at once (the official Python SDK) at `fusebox
serve`'s `/mcp`, in front of the stdio people server (`mcp_people_server.py`),
each with its own caller key and its own answers to what the server asks:
  elicitation per session   ask_person, concurrently from both, a few times:
                            each gets its own name back, and each session's
                            elicitation callback ran once per its own call
  sampling per session      summarise, likewise, with each its own text
  progress and logs         steps, from one session, then from both at once a
                            few times: each caller's progress callback and
                            logging callback get every step of its own calls,
                            and nothing of the other's
  resources                 list, read people://greeting, list templates,
                            read people://user/7
  prompts                   list, get greet {name}
Env: FUSEBOX_BASE_URL (e.g. http://127.0.0.1:8787), FUSEBOX_KEY_A and
FUSEBOX_KEY_B (two caller keys; unset: no Authorization header). With
FUSEBOX_PEOPLE_DIRECT=1 the sessions talk to the server over stdio directly
(no gateway), to tell a fusebox fault from the script's. Prints `ok <check>`
per pass; exits non-zero on a failure.
"""
import asyncio
import contextlib
import os
import sys
import traceback
import warnings

import httpx2

from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning

DIRECT = os.environ.get("FUSEBOX_PEOPLE_DIRECT") == "1"
SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mcp_people_server.py")
ROUNDS = 3
STEPS = 4
STEP_ROUNDS = 8
# Sampling and logging are deprecated by the 2026-07-28 protocol but still spoken.
warnings.simplefilter("ignore", MCPDeprecationWarning)


class Person:
    """One client session's side: its answers, and what reached it."""

    def __init__(self, label, key, name, summary):
        self.label, self.key, self.name, self.summary = label, key, name, summary
        self.elicited = 0
        self.sampled = 0
        self.logs = []
        self.notes = []  # every server notification the session surfaced
        self.session = None

    async def elicit(self, context, params):
        self.elicited += 1
        await asyncio.sleep(0.05)  # so the sessions' asks overlap
        return types.ElicitResult(action="accept", content={"name": self.name})

    async def sample(self, context, params):
        self.sampled += 1
        await asyncio.sleep(0.05)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=self.summary),
            model=f"model-of-{self.label}",
        )

    async def log(self, params):
        self.logs.append(params.data)

    async def message(self, message):
        if isinstance(message, Exception):
            print(f"   [{self.label}] transport error: {message!r}", file=sys.stderr)
        else:
            self.notes.append(message)

    @contextlib.asynccontextmanager
    async def open(self):
        async with contextlib.AsyncExitStack() as stack:
            if DIRECT:
                from mcp.client.stdio import StdioServerParameters, stdio_client

                params = StdioServerParameters(command=sys.executable, args=[SERVER])
                read, write = await stack.enter_async_context(stdio_client(params))
            else:
                base = os.environ.get("FUSEBOX_BASE_URL", "").rstrip("/")
                if not base:
                    sys.exit("FUSEBOX_BASE_URL is not set (e.g. http://127.0.0.1:8787)")
                headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300))
                )
                read, write = await stack.enter_async_context(streamable_http_client(f"{base}/mcp", http_client=http))
            session = await stack.enter_async_context(
                ClientSession(
                    read,
                    write,
                    elicitation_callback=self.elicit,
                    sampling_callback=self.sample,
                    logging_callback=self.log,
                    message_handler=self.message,
                )
            )
            await session.initialize()
            self.session = session
            yield self


def text_of(result):
    assert not result.is_error, f"isError: {result}"
    return " ".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def elicitation(a, b):
    async def ask(p, i):
        got = text_of(await p.session.call_tool("ask_person", {"question": f"who are you? ({p.label} {i})"}))
        assert got == f"action=accept name={p.name}", f"{p.label} got {got!r}"

    before = (a.elicited, b.elicited)
    await asyncio.gather(*(ask(p, i) for i in range(ROUNDS) for p in (a, b)))
    got = (a.elicited - before[0], b.elicited - before[1])
    assert got == (ROUNDS, ROUNDS), f"elicitation callbacks ran {got} times, not {ROUNDS} each"


async def sampling(a, b):
    async def summarise(p, i):
        got = text_of(await p.session.call_tool("summarise", {"text": f"the {p.label} report {i}"}))
        assert got == p.summary, f"{p.label} got {got!r}, not {p.summary!r}"

    before = (a.sampled, b.sampled)
    await asyncio.gather(*(summarise(p, i) for i in range(ROUNDS) for p in (a, b)))
    got = (a.sampled - before[0], b.sampled - before[1])
    assert got == (ROUNDS, ROUNDS), f"sampling callbacks ran {got} times, not {ROUNDS} each"


async def mixed(a, b):
    """Elicitation and sampling from both sessions at once."""
    before = (a.elicited, b.elicited, a.sampled, b.sampled)
    calls = []
    for p in (a, b):
        calls.append(p.session.call_tool("ask_person", {"question": "and now?"}))
        calls.append(p.session.call_tool("summarise", {"text": "all of it"}))
    results = await asyncio.gather(*calls)
    assert [text_of(r) for r in results] == [
        f"action=accept name={a.name}", a.summary, f"action=accept name={b.name}", b.summary
    ], [text_of(r) for r in results]
    after = (a.elicited, b.elicited, a.sampled, b.sampled)
    assert [x - y for x, y in zip(after, before)] == [1, 1, 1, 1], f"callbacks ran {after} after {before}"


async def steps(p, n):
    """`steps` with n from p's session: its progress, the progress its
    session saw in all, and how much of it came before the result."""
    progress = []

    async def on_progress(value, total, message):
        progress.append((value, total, message))

    first = len(p.notes)
    got = text_of(await p.session.call_tool("steps", {"n": n}, progress_callback=on_progress))
    assert got == "done", got
    before = len([x for x in p.notes[first:] if isinstance(x, types.ProgressNotification)])
    # Anything trailing the result has a moment to arrive.
    await asyncio.sleep(0.3)
    seen = [x.params.progress for x in p.notes[first:] if isinstance(x, types.ProgressNotification)]
    return progress, seen, before


def progress_as_wanted(p, n, got):
    progress, seen, before = got
    want = [(float(i), float(n), f"step {i}") for i in range(1, n + 1)]
    assert progress == want, (
        f"{p.label}: progress {progress}, want {want}; its session saw progress {seen} in all,"
        f" {before} of them before the tool's result"
    )


def logs_as_wanted(p, ns):
    want = sorted(f"step {i} of {n}" for n in ns for i in range(1, n + 1))
    assert sorted(p.logs) == want, f"{p.label}: logs {p.logs}, want {want}"


async def progress_and_logs(a, b):
    wrong = []  # every miss, not just the first: a fault shows its whole shape

    def check(f, *args):
        try:
            f(*args)
        except AssertionError as e:
            wrong.append(str(e))

    # One session calls: the other hears nothing of it.
    a.logs.clear()
    b.logs.clear()
    b_notes = len(b.notes)
    check(progress_as_wanted, a, STEPS, await steps(a, STEPS))
    check(logs_as_wanted, a, [STEPS])
    if b.logs:
        wrong.append(f"the other session got logs: {b.logs}")
    told = (types.ProgressNotification, types.LoggingMessageNotification)
    crossed = [n for n in b.notes[b_notes:] if isinstance(n, told)]
    if crossed:
        wrong.append(f"the other session got notifications: {crossed}")
    # Both call at once, a few times, each its own number of steps: each
    # hears all of its own and nothing of the other's.
    for _ in range(STEP_ROUNDS):
        a.logs.clear()
        b.logs.clear()
        got_a, got_b = await asyncio.gather(steps(a, STEPS), steps(b, STEPS + 2))
        check(progress_as_wanted, a, STEPS, got_a)
        check(progress_as_wanted, b, STEPS + 2, got_b)
        check(logs_as_wanted, a, [STEPS])
        check(logs_as_wanted, b, [STEPS + 2])
    assert not wrong, f"{len(wrong)} wrong of {2 + 4 * STEP_ROUNDS}:\n   " + "\n   ".join(wrong)


async def resources(a, b):
    listed = await a.session.list_resources()
    uris = [str(r.uri) for r in listed.resources]
    assert uris == ["people://greeting"], uris
    read = await a.session.read_resource("people://greeting")
    assert [c.text for c in read.contents] == ["hello from people"], read
    templates = await b.session.list_resource_templates()
    assert [t.uri_template for t in templates.resource_templates] == ["people://user/{id}"], templates
    read = await b.session.read_resource("people://user/7")
    assert [c.text for c in read.contents] == ["user 7"], read
    assert [str(c.uri) for c in read.contents] == ["people://user/7"], read


async def prompts(a, b):
    listed = await a.session.list_prompts()
    assert [(p.name, [x.name for x in p.arguments or []]) for p in listed.prompts] == [("greet", ["name"])], listed
    got = await b.session.get_prompt("greet", {"name": "Carol"})
    texts = [m.content.text for m in got.messages if getattr(m.content, "type", "") == "text"]
    assert texts == ["Please greet Carol warmly."], got


async def main():
    a = Person("a", os.environ.get("FUSEBOX_KEY_A"), "alice", "alice's summary")
    b = Person("b", os.environ.get("FUSEBOX_KEY_B"), "bob", "bob's summary")
    failed = []
    async with a.open(), b.open():
        for name, check in [
            ("elicitation per session", elicitation),
            ("sampling per session", sampling),
            ("elicitation and sampling at once", mixed),
            ("progress and logs to the caller", progress_and_logs),
            ("resources", resources),
            ("prompts", prompts),
        ]:
            try:
                await asyncio.wait_for(check(a, b), 60)
                print(f"ok {name}", flush=True)
            except Exception as e:
                failed.append(name)
                print(f"FAIL {name}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                traceback.print_exc(limit=4)
    return failed


failed = asyncio.run(main())
if failed:
    sys.exit(f"failed: {', '.join(failed)}")
