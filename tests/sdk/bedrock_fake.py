"""The strict fake's Bedrock as AWS's official SDK (boto3's `bedrock-runtime`
client with `endpoint_url`) calls it, every request signed by botocore and
verified by the fake: Converse plain, ConverseStream, a tool loop, an image,
Titan's and Cohere's embeddings by InvokeModel, and a wrong secret refused as Bedrock refuses it.
Env: FUSEBOX_BASE_URL (the fake's root), FUSEBOX_AWS_KEY_ID and
FUSEBOX_AWS_SECRET (the fake's account). Prints `ok <check>` per pass.
"""
import base64
import json
import os

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from _wire import BASE_URL, run_checks

MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"
NO_RETRY = Config(retries={"total_max_attempts": 1})


def client(secret=None):
    return boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=BASE_URL, config=NO_RETRY,
                        aws_access_key_id=os.environ["FUSEBOX_AWS_KEY_ID"],
                        aws_secret_access_key=secret or os.environ["FUSEBOX_AWS_SECRET"])


rt = client()
ASK = [{"role": "user", "content": [{"text": "Where is order #38100?"}]}]
TOOLS = {"tools": [{"toolSpec": {"name": "get_order", "description": "Look up an order",
                                 "inputSchema": {"json": {"type": "object",
                                                          "properties": {"order_id": {"type": "string"}}}}}}]}
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


def plain():
    r = rt.converse(modelId=MODEL, messages=ASK, system=[{"text": "Be brief."}],
                    inferenceConfig={"maxTokens": 200, "temperature": 0.2})
    assert r["output"]["message"]["content"][0]["text"].startswith("Order 38100"), r
    assert r["stopReason"] == "end_turn" and r["usage"]["totalTokens"] == 37, r


def streamed():
    r = rt.converse_stream(modelId=MODEL, messages=ASK)
    text, stop, usage = "", None, None
    for event in r["stream"]:
        if "contentBlockDelta" in event:
            text += event["contentBlockDelta"]["delta"].get("text", "")
        stop = event.get("messageStop", {}).get("stopReason", stop)
        usage = event.get("metadata", {}).get("usage", usage)
    assert text.startswith("Order 38100") and text.endswith("two days."), text
    assert stop == "end_turn" and usage["outputTokens"] == 12, (stop, usage)


def tool_loop():
    r = rt.converse(modelId=MODEL, messages=ASK, toolConfig=TOOLS)
    assert r["stopReason"] == "tool_use", r
    use = r["output"]["message"]["content"][0]["toolUse"]
    assert use["name"] == "get_order" and use["input"] == {"order_id": "38100"}, use
    messages = ASK + [r["output"]["message"], {"role": "user", "content": [
        {"toolResult": {"toolUseId": use["toolUseId"], "content": [{"json": {"status": "in transit"}}]}}]}]
    r = rt.converse(modelId=MODEL, messages=messages, toolConfig=TOOLS)
    assert r["output"]["message"]["content"][0]["text"].startswith("The order service says:"), r


def image():
    ask = [{"role": "user", "content": [{"text": "What is this?"}, {"image": {"format": "png", "source": {"bytes": PNG}}}]}]
    r = rt.converse(modelId=MODEL, messages=ask)
    assert r["stopReason"] == "end_turn", r


def titan_embeddings():
    r = rt.invoke_model(modelId="amazon.titan-embed-text-v2:0",
                        body=json.dumps({"inputText": "where is my order", "dimensions": 256}))
    b = json.loads(r["body"].read())
    assert len(b["embedding"]) == 256 and b["inputTextTokenCount"] == 4, b


def cohere_embeddings():
    r = rt.invoke_model(modelId="cohere.embed-english-v3", contentType="application/json", accept="*/*",
                        body=json.dumps({"texts": ["where is my order", "refund"], "input_type": "search_query"}))
    b = json.loads(r["body"].read())
    assert [len(e) for e in b["embeddings"]] == [1024, 1024], b["texts"]


def wrong_secret():
    try:
        client(secret="not-the-secret").converse(modelId=MODEL, messages=ASK)
    except ClientError as e:
        code = e.response["Error"]["Code"]
        assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 403 and code == "InvalidSignatureException", e.response
        return
    raise AssertionError("a request signed with a wrong secret was answered")


run_checks([
    ("converse", plain),
    ("converse stream", streamed),
    ("tool loop", tool_loop),
    ("image", image),
    ("titan embeddings", titan_embeddings),
    ("cohere embeddings", cohere_embeddings),
    ("wrong secret refused", wrong_secret),
])
