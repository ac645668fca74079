"""The strict fake's Vertex AI as Google's official `google-genai` SDK calls
it with a service account's key (`google-auth` signs the JWT the fake's token
endpoint verifies): plain, streamed, a signed tool loop, embeddings by
`predict` and `batchEmbedContents`, on the v1 and v1beta1 paths.
Env: FUSEBOX_BASE_URL (the fake's root), FUSEBOX_VERTEX_KEY (the key file,
its token_uri the fake's). Prints `ok <check>` per pass.
"""
import os

from google import genai
from google.genai import types
from google.oauth2 import service_account

from _wire import BASE_URL, run_checks

MODEL = "gemini-2.5-flash"
CREDS = service_account.Credentials.from_service_account_file(
    os.environ["FUSEBOX_VERTEX_KEY"], scopes=["https://www.googleapis.com/auth/cloud-platform"])


def client(version):
    opts = types.HttpOptions(base_url=BASE_URL, api_version=version,
                             retry_options=types.HttpRetryOptions(attempts=1))
    return genai.Client(vertexai=True, project="fusebox-test", location="us-central1", credentials=CREDS,
                        http_options=opts)


v1 = client("v1")
TOOLS = types.GenerateContentConfig(
    tools=[types.Tool(function_declarations=[types.FunctionDeclaration(
        name="get_order", description="Look up an order's shipping status by id.",
        parameters_json_schema={"type": "object", "properties": {"order_id": {"type": "string"}}})])],
    automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
ASK = types.Content(role="user", parts=[types.Part(text="Where is order #38100?")])


def plain():
    r = v1.models.generate_content(model=MODEL, contents="Where is order #38100?")
    assert r.text.startswith("Order 38100") and r.usage_metadata.total_token_count == 37, r


def streamed():
    text = "".join(c.text or "" for c in v1.models.generate_content_stream(model=MODEL, contents=[ASK]))
    assert text.startswith("Order 38100") and text.endswith("two days."), text


def tool_loop():
    r = v1.models.generate_content(model=MODEL, contents=[ASK], config=TOOLS)
    turn = r.candidates[0].content
    assert r.function_calls and turn.parts[0].thought_signature, r
    answer = types.Content(role="user", parts=[
        types.Part.from_function_response(name="get_order", response={"result": "in transit"})])
    r = v1.models.generate_content(model=MODEL, contents=[ASK, turn, answer], config=TOOLS)
    assert r.text == "The order service says: in transit", r.text


def embeddings():
    r = v1.models.embed_content(model="text-embedding-005", contents=["where is my order", "refund"],
                                config=types.EmbedContentConfig(output_dimensionality=4))
    assert [len(e.values) for e in r.embeddings] == [4, 4], r
    assert r.embeddings[0].statistics.token_count == 4, r
    r = v1.models.embed_content(model="gemini-embedding-001", contents=["where is my order", "refund"])
    assert [len(e.values) for e in r.embeddings] == [8, 8], r


def beta_path():
    c = client("v1beta1")  # kept: a client collected closes its connections
    r = c.models.generate_content(model=MODEL, contents=[ASK])
    assert r.text.startswith("Order 38100"), r


run_checks([
    ("plain", plain),
    ("streamed", streamed),
    ("tool loop", tool_loop),
    ("embeddings", embeddings),
    ("v1beta1 path", beta_path),
])
