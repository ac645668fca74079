"""The official `openai` Python SDK against gateways whose upstream breaks in a known way.

Env: FUSEBOX_FAULT_CASES, a JSON list of {"id", "base", "stream", "count", "spacing_s"}: for each
case, `count` chat completions (streamed when `stream`, with usage), `spacing_s` apart, to the gateway
at `base`. The cases run at once, one thread each. Prints one JSON line per request: what the client
got (text, finish reason, usage, model) or the exception the SDK raised (its class, status, body).
The SDK's own retries are off, so what the client gets is the gateway's doing.
"""
import json
import os
import sys
import threading
import time

from openai import OpenAI, APIStatusError

ASK = [{"role": "user", "content": "Where is order #38100?"}]
lock = threading.Lock()


def one(client, stream):
    if not stream:
        r = client.chat.completions.create(model="default", messages=ASK)
        c = r.choices[0]
        u = r.usage
        return {"text": c.message.content, "finish": c.finish_reason, "model": r.model,
                "usage": [u.prompt_tokens, u.completion_tokens, u.total_tokens]}
    text, finish, usage, models = "", None, None, []
    for chunk in client.chat.completions.create(model="default", messages=ASK, stream=True,
                                                stream_options={"include_usage": True}):
        models.append(chunk.model)
        if chunk.usage is not None:
            usage = [chunk.usage.prompt_tokens, chunk.usage.completion_tokens, chunk.usage.total_tokens]
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    return {"text": text, "finish": finish, "model": models[-1] if models else None, "usage": usage}


def run(case):
    client = OpenAI(base_url=f"{case['base']}/v1", api_key="unused", max_retries=0, timeout=120)
    for i in range(case.get("count", 1)):
        if i:
            time.sleep(case.get("spacing_s", 0))
        start = time.monotonic()
        try:
            got = one(client, case["stream"])
        except APIStatusError as e:
            got = {"error": type(e).__name__, "status": e.status_code, "body": e.body}
        except Exception as e:  # what an agent would crash on
            got = {"error": type(e).__name__, "message": str(e)}
        got.update(id=case["id"], i=i, elapsed=round(time.monotonic() - start, 3))
        with lock:
            print(json.dumps(got), flush=True)


def main():
    cases = json.loads(os.environ["FUSEBOX_FAULT_CASES"])
    threads = [threading.Thread(target=run, args=(c,)) for c in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
