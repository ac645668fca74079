"""Shared bits for the SDK checks: the gateway URL, and an httpx2 client whose
event hooks remember the last request/response so a failing check can show
exactly what went over the wire (set FUSEBOX_WIRE=1 to print every exchange)."""
import json
import os
import sys

import httpx2

BASE_URL = os.environ.get("FUSEBOX_BASE_URL", "").rstrip("/")
if not BASE_URL:
    sys.exit("FUSEBOX_BASE_URL is not set (e.g. http://127.0.0.1:8787)")
VERBOSE = os.environ.get("FUSEBOX_WIRE") == "1"
last = {}  # the last exchange: method, url, request body, status, response body


def _body(raw: bytes) -> str:
    try:
        return json.dumps(json.loads(raw), indent=1)
    except Exception:
        return raw.decode("utf-8", "replace")


def _on_request(req):
    last.clear()
    last.update(method=req.method, url=str(req.url), request=_body(req.content or b""))
    if VERBOSE:
        print(f">> {req.method} {req.url}\n{last['request']}", file=sys.stderr)


def _on_response(resp, body=None):
    last["status"] = resp.status_code
    # Only buffer error bodies: reading a 200 stream here would defeat streaming.
    last["response"] = _body(body) if body is not None else "(not buffered: success or stream)"
    if VERBOSE:
        print(f"<< {resp.status_code} {last['response']}", file=sys.stderr)


def sync_client() -> httpx2.Client:
    def on_response(resp):
        _on_response(resp, resp.read() if resp.status_code >= 400 else None)
    return httpx2.Client(event_hooks={"request": [_on_request], "response": [on_response]})


def async_client() -> httpx2.AsyncClient:
    async def on_request(req):
        _on_request(req)

    async def on_response(resp):
        _on_response(resp, await resp.aread() if resp.status_code >= 400 else None)
    return httpx2.AsyncClient(event_hooks={"request": [on_request], "response": [on_response]})


def dump_last(out=sys.stderr):
    """Print the last HTTP exchange (call this when a check fails)."""
    if not last:
        print("   (no HTTP exchange recorded)", file=out)
        return
    print(f"   last request: {last.get('method')} {last.get('url')}", file=out)
    print(f"   request body: {last.get('request')}", file=out)
    print(f"   response status: {last.get('status')}", file=out)
    print(f"   response body: {last.get('response')}", file=out)


def run_checks(checks):
    """Run (name, fn) pairs in order; print `ok name`; stop at the first failure."""
    import traceback
    for name, fn in checks:
        try:
            fn()
        except Exception as e:
            print(f"FAIL {name}: {type(e).__name__}: {e}", file=sys.stderr)
            traceback.print_exc()
            dump_last()
            sys.exit(1)
        print(f"ok {name}")
