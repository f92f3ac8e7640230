"""kvgate's SglangScheduler service (the SMG gRPC worker) over a real channel to the real app.

One in-process server (``create_app`` under uvicorn, the gRPC listener on its event loop) with the
embedded model. Its device tier has a 1-byte budget, so every finished request's entry is evicted
as soon as it is admitted: each request shows both KV events, stored then removed.
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
import time
import zipfile

import grpc
import pytest
from smg_grpc_proto.generated import common_pb2
from smg_grpc_proto.generated import sglang_scheduler_pb2 as pb
from tokenizers import Tokenizer

from kvgate.core.config import config_from_dict
from kvgate.core.plugins import build_plugin_manager
from tests.adapters.grpc_client import generate_request, scheduler
from tests.core.cache.app_server import AppServer
from tests.harness import free_port

pytestmark = pytest.mark.slow
PROMPT = "<|im_start|>user\nWrite a short poem about the sea and the sky, with rhymes.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    port = free_port()
    config = config_from_dict({"state_dir": str(tmp_path_factory.mktemp("grpc")),
                               "cache": {"ssd_enabled": False, "device_bytes": 1},
                               "grpc": {"enabled": True, "port": port}})
    with AppServer(config, build_plugin_manager()) as server:
        channel, stub = scheduler(port)
        yield server, stub
        channel.close()


def prompt_ids(server, text=PROMPT) -> list[int]:
    return server.app.state.ctx.pipeline.runtime.tokenizer.encode(text).ids


def test_generate_streams_token_ids_then_a_finish_with_counts(worker):
    server, stub = worker
    ids = prompt_ids(server)
    frames = list(stub.Generate(generate_request(ids, max_new_tokens=8)))
    chunks, last = frames[:-1], frames[-1]
    assert [f.WhichOneof("response") for f in chunks] == ["chunk"] * 8 and last.WhichOneof("response") == "complete"
    streamed = [t for f in chunks for t in f.chunk.token_ids]
    assert [f.chunk.completion_tokens for f in chunks] == list(range(1, 9))
    assert last.complete.finish_reason == "length" and last.complete.completion_tokens == 8
    assert last.complete.prompt_tokens == len(ids) and all(f.request_id == "r1" for f in frames)
    whole = list(stub.Generate(generate_request(ids, request_id="r2", stream=False, max_new_tokens=8)))
    assert len(whole) == 1 and list(whole[0].complete.output_ids) == streamed  # greedy: the same ids
    text = server.app.state.ctx.pipeline.runtime.tokenizer.decode(streamed)
    assert text.strip()


def test_the_worker_stops_on_eos_itself(worker):
    server, stub = worker
    ids = prompt_ids(server, "<|im_start|>user\nReply with the single word: yes<|im_end|>\n<|im_start|>assistant\n")
    frames = list(stub.Generate(generate_request(ids, max_new_tokens=64)))  # the gateway sends no stop ids
    eos = server.app.state.ctx.pipeline.runtime.info.eos_token_ids
    streamed = [t for f in frames[:-1] for t in f.chunk.token_ids]
    assert frames[-1].complete.finish_reason == "stop" and len(streamed) < 64
    assert not set(streamed) & set(eos)  # the EOS id ends the stream, it is not streamed


def test_a_stop_string_ends_generation_at_the_token_that_completes_it(worker):
    server, stub = worker
    tokenizer = server.app.state.ctx.pipeline.runtime.tokenizer
    ids = prompt_ids(server)
    free = [t for f in list(stub.Generate(generate_request(ids, max_new_tokens=16)))[:-1] for t in f.chunk.token_ids]
    text = tokenizer.decode(free)
    stop = text.split()[3]  # a word in the middle of the greedy answer
    frames = list(stub.Generate(generate_request(ids, request_id="stop", max_new_tokens=16, stop=[stop])))
    sent = [t for f in frames[:-1] for t in f.chunk.token_ids]
    assert frames[-1].complete.finish_reason == "stop" and frames[-1].complete.matched_stop_str == stop
    assert sent == free[:len(sent)] and len(sent) < len(free)
    assert stop in tokenizer.decode(sent) and stop not in tokenizer.decode(sent[:-1])


def test_abort_cancels_a_running_generate(worker):
    server, stub = worker
    stream = stub.Generate(generate_request(prompt_ids(server), request_id="long", max_new_tokens=4000,
                                            ignore_eos=True))
    first = next(stream)
    assert first.WhichOneof("response") == "chunk"
    assert stub.Abort(pb.AbortRequest(request_id="long")).success
    rest = list(stream)
    assert rest[-1].complete.finish_reason == "abort" and rest[-1].complete.completion_tokens < 4000
    assert not stub.Abort(pb.AbortRequest(request_id="long")).success  # no longer running
    assert stub.GetLoads(pb.GetLoadsRequest()).loads[0].num_running_reqs == 0


def test_get_loads_count_a_running_request(worker):
    server, stub = worker
    stream = stub.Generate(generate_request(prompt_ids(server), request_id="busy", max_new_tokens=400,
                                            ignore_eos=True))
    next(stream)
    busy = stub.GetLoads(pb.GetLoadsRequest()).loads[0]
    stub.Abort(pb.AbortRequest(request_id="busy"))
    list(stream)
    idle = stub.GetLoads(pb.GetLoadsRequest())
    assert busy.num_running_reqs == 1 and busy.num_used_tokens > 0 and 0 < busy.token_usage < 1
    assert idle.loads[0].num_running_reqs == idle.loads[0].num_waiting_reqs == 0 and idle.dp_rank_count == 1
    assert busy.max_total_num_tokens == idle.loads[0].max_total_num_tokens > busy.num_used_tokens


def test_model_and_server_info_describe_the_served_model(worker):
    server, stub = worker
    runtime = server.app.state.ctx.pipeline.runtime
    model = stub.GetModelInfo(pb.GetModelInfoRequest())
    info = stub.GetServerInfo(pb.GetServerInfoRequest())
    assert model.is_generation and model.max_context_length == runtime.info.max_context
    assert list(model.eos_token_ids) == runtime.info.eos_token_ids and model.vocab_size == runtime.info.vocab_size
    assert info.server_type == "grpc" and info.server_args["page_size"] == runtime.block_size
    assert stub.HealthCheck(pb.HealthCheckRequest()).healthy


def test_get_tokenizer_streams_a_zip_whose_sha256_checks(worker):
    server, stub = worker
    chunks = list(stub.GetTokenizer(common_pb2.GetTokenizerRequest()))
    data = b"".join(c.data for c in chunks)
    assert chunks[-1].sha256 == hashlib.sha256(data).hexdigest()
    assert all(not c.sha256 for c in chunks[:-1]) and len(chunks) > 1  # tokenizer.json is over one chunk
    files = zipfile.ZipFile(io.BytesIO(data))
    assert sorted(files.namelist()) == ["config.json", "tokenizer.json", "tokenizer_config.json"]
    tokenizer = Tokenizer.from_str(files.read("tokenizer.json").decode())
    assert tokenizer.encode(PROMPT).ids == prompt_ids(server)
    config = json.loads(files.read("tokenizer_config.json"))
    assert "<|im_start|>" in config["chat_template"] and config["eos_token"] == "<|im_end|>"
    assert json.loads(files.read("config.json"))["vocab_size"] == tokenizer.get_vocab_size()


def test_kv_events_announce_a_prefill_and_its_eviction(worker):
    server, stub = worker
    events = stub.SubscribeKvEvents(common_pb2.SubscribeKvEventsRequest())
    started = time.monotonic()
    events.initial_metadata()  # the headers come at once: SMG gives up after 2 s
    assert time.monotonic() - started < 2
    batches: list = []
    reader = threading.Thread(target=lambda: [batches.append(b) for b in _until_cancelled(events)], daemon=True)
    reader.start()
    ids = prompt_ids(server, PROMPT + "Here is one: ")
    frames = list(stub.Generate(generate_request(ids, request_id="ev", max_new_tokens=10)))
    deadline = time.monotonic() + 10
    while len(batches) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    events.cancel()
    stored, removed = (batches[0].events[0], batches[1].events[0])
    held = ids + [t for f in frames[:-1] for t in f.chunk.token_ids][:-1]  # the last token is never fed
    blocks = stored.stored.blocks
    assert stored.WhichOneof("data") == "stored" and not stored.stored.HasField("parent_block_hash")
    assert [t for b in blocks for t in b.token_ids] == held[:len(held) // 16 * 16]
    assert all(b.block_size == 16 for b in blocks) and len({b.block_hash for b in blocks}) == len(blocks)
    assert removed.WhichOneof("data") == "removed"  # the 1-byte device budget evicts it at once
    assert sorted(removed.removed.block_hashes) == sorted(b.block_hash for b in blocks)
    assert batches[1].sequence_number == batches[0].sequence_number + 1


def _until_cancelled(stream):
    try:
        yield from stream
    except grpc.RpcError:
        return


@pytest.mark.parametrize("change, needle", [
    ({"sampling": {"regex": "[0-9]+"}}, "constraint regex is not supported"),
    ({"sampling": {"ebnf_grammar": "root ::= \"a\""}}, "constraint ebnf_grammar is not supported"),
    ({"sampling": {"json_schema": "{not json"}}, "json_schema is not JSON"),
    ({"ids": []}, "input_ids is empty"),
    ({"ids": [49152]}, "outside the vocabulary"),
    ({"max_new_tokens": 40000}, "exceeds this model's context"),
    ({"sampling": {"n": 2}}, "n > 1"),
])
def test_bad_input_is_invalid_argument(worker, change, needle):
    server, stub = worker
    ids = change.get("ids", prompt_ids(server))
    request = generate_request(ids, request_id="bad", max_new_tokens=change.get("max_new_tokens", 4),
                               **change.get("sampling", {}))
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.Generate(request))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and needle in caught.value.details()
    assert stub.HealthCheck(pb.HealthCheckRequest()).healthy


def test_a_json_schema_constraint_is_fenced(worker):
    server, stub = worker
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
              "additionalProperties": False}
    ids = prompt_ids(server, "<|im_start|>user\nName a city, as JSON.<|im_end|>\n<|im_start|>assistant\n")
    frames = list(stub.Generate(generate_request(ids, request_id="json", max_new_tokens=48,
                                                 json_schema=json.dumps(schema))))
    text = server.app.state.ctx.pipeline.runtime.tokenizer.decode([t for f in frames[:-1] for t in f.chunk.token_ids])
    assert frames[-1].complete.finish_reason == "stop"
    assert set(json.loads(text)) == {"city"}


@pytest.mark.parametrize("change, needle", [
    ({"temperature": float("nan")}, "sampling_params.temperature must be a finite number"),
    ({"top_p": float("inf")}, "sampling_params.top_p must be a finite number"),
    ({"presence_penalty": float("nan")}, "sampling_params.presence_penalty must be a finite number"),
    ({"repetition_penalty": float("-inf")}, "sampling_params.repetition_penalty must be a finite number"),
    ({"seed": float("nan")}, "custom_params.seed must be an integer"),
    ({"seed": float("inf")}, "custom_params.seed must be an integer"),
    ({"seed": 1.5}, "custom_params.seed must be an integer"),
    ({"seed": -1.0}, "custom_params.seed must be an integer"),
])
def test_nan_infinite_and_non_integer_sampling_values_are_invalid_argument(worker, change, needle):
    server, stub = worker
    request = generate_request(prompt_ids(server), request_id="nan", max_new_tokens=4)
    for name, value in change.items():
        if name == "seed":
            request.sampling_params.custom_params.update({"seed": value})
        else:
            setattr(request.sampling_params, name, value)
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.Generate(request))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and needle in caught.value.details()


def test_a_request_id_already_running_is_refused_and_abort_stays_unambiguous(worker):
    server, stub = worker
    first = stub.Generate(generate_request(prompt_ids(server), request_id="twice", max_new_tokens=4000,
                                           ignore_eos=True))
    assert next(first).WhichOneof("response") == "chunk"
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.Generate(generate_request(prompt_ids(server), request_id="twice", max_new_tokens=4)))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "already running" in caught.value.details()
    assert stub.Abort(pb.AbortRequest(request_id="twice")).success
    assert list(first)[-1].complete.finish_reason == "abort"
