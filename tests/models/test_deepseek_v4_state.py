"""What a DeepSeek V4 session holds (K=V rows per token, entries per window, a bounded raw tail per
compressed layer), on the tiny model of tests/models/tiny_deepseek_v4.py (rates 4 and 8, window 8):
cuts that reach back past the raw tail replay a few tokens and still continue as a one-shot forward
(transformers, no cache); a cut of a few tokens does not replay; chunks end anywhere; corrupt chunks
are refused; ``session_bytes`` is what the session's tensors take.
"""

from __future__ import annotations

import attrs
import pytest
import torch

from tests.models.tiny_deepseek_v4 import add_mtp_layer, build_tiny_v4, load_tiny_v4, reference_logits

TOLERANCE = 1e-4
PROMPT = [(i * 37 + 11) % 97 for i in range(37)]
OTHER = [(i * 53 + 5) % 97 for i in range(37)]
CSA_RATE, HCA_RATE = 4, 8


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    directory = tmp_path_factory.mktemp("deepseek_v4_state")
    return directory, build_tiny_v4(directory)


@pytest.fixture(scope="module")
def runtime(tiny):
    return load_tiny_v4(tiny[0])


@pytest.fixture(scope="module")
def reference(tiny):
    return reference_logits(tiny[1], PROMPT)


def close(a, b):
    return torch.allclose(a, b, atol=TOLERANCE, rtol=0)


def test_cuts_far_back_replay_a_few_tokens_and_continue_as_one_shot(tiny, runtime, reference):
    longest = 0
    for length in range(len(PROMPT)):
        session = runtime.new_session()
        runtime.prefill(session, PROMPT)
        rows = runtime.export_state(session)
        replays, tokens = runtime.replays, runtime.replayed_tokens
        fork = runtime.fork(session, length)
        assert runtime.export_state(session) == rows  # the replay wrote nothing into the shared blocks
        runtime.truncate(session, length)
        replayed = runtime.replays - replays
        longest = max(longest, (runtime.replayed_tokens - tokens) // max(replayed, 1))
        if 0 < length <= len(PROMPT) - HCA_RATE - 1:  # the raw rows of its open windows are long gone
            assert replayed == 2, length
        elif length >= len(PROMPT) - CSA_RATE:
            assert replayed == 0, length
        assert close(runtime.prefill(fork, PROMPT[length:], all_logits=True), reference[length:]), length
        other = PROMPT[:length] + OTHER[length:]
        expected = reference_logits(tiny[1], other)[length:]
        assert close(runtime.prefill(session, other[length:], all_logits=True), expected), length
        runtime.release(session)
        runtime.release(fork)
    assert longest == max(HCA_RATE, 2 * CSA_RATE) - 1 <= HCA_RATE + CSA_RATE - 1


def test_dropping_one_to_three_tokens_never_replays(runtime, reference):
    for length in range(4, len(PROMPT)):
        for drop in (1, 2, 3):
            session = runtime.new_session()
            if length > 4:
                runtime.prefill(session, PROMPT[:length - 4])
            for token in PROMPT[length - 4:length]:  # as a verifying decode appends them
                if session.length:
                    runtime.decode([session], [token])
                else:
                    runtime.prefill(session, [token])
            replays = runtime.replays
            runtime.truncate(session, length - drop)
            assert runtime.replays == replays, (length, drop)
            assert close(runtime.prefill(session, PROMPT[length - drop:], all_logits=True),
                         reference[length - drop:]), (length, drop)
            runtime.release(session)


def test_chunks_ending_at_every_token_restore_a_session_that_continues_as_one_shot(tiny, runtime, reference):
    source = runtime.new_session()
    runtime.prefill(source, PROMPT[:30])
    restarted = load_tiny_v4(tiny[0])
    for split in range(1, 30):
        first, second = runtime.export_chunk(source, 0, split), runtime.export_chunk(source, split, 30)
        part = restarted.new_session()
        restarted.import_chunk(part, PROMPT[:split], first)
        assert close(restarted.prefill(part, PROMPT[split:], all_logits=True), reference[split:]), split
        whole = restarted.new_session()
        restarted.import_chunk(whole, PROMPT[:split], first)
        restarted.import_chunk(whole, PROMPT[split:30], second)
        assert close(restarted.prefill(whole, PROMPT[30:], all_logits=True), reference[30:]), split
        restarted.release(part)
        restarted.release(whole)
    runtime.release(source)


def reframed(chunk: bytes, kv_shift: int = 0, aux_cut: int = 0) -> bytes:
    """The chunk with ``kv_shift`` bytes moved from its aux to its KV and its last ``aux_cut`` bytes
    dropped, the header rewritten to match: sizes that frame well but do not fit the tokens."""
    kv_len, aux_len = int.from_bytes(chunk[:8], "little"), int.from_bytes(chunk[8:16], "little")
    kv_len, aux_len = kv_len + kv_shift, aux_len - kv_shift - aux_cut
    return kv_len.to_bytes(8, "little") + aux_len.to_bytes(8, "little") + chunk[16:len(chunk) - aux_cut]


def test_malformed_chunks_are_refused_and_leave_the_session_as_it_was(tiny, runtime, reference):
    source = runtime.new_session()
    runtime.prefill(source, PROMPT[:30])
    first, second = runtime.export_chunk(source, 0, 13), runtime.export_chunk(source, 13, 30)
    restarted = load_tiny_v4(tiny[0])
    session = restarted.new_session()
    bad_first = [first[:-1], first[:10], reframed(first, aux_cut=4), reframed(first, kv_shift=4),
                 reframed(first, kv_shift=-4), first[:8] + (2 ** 63).to_bytes(8, "little") + first[16:]]
    for data in bad_first:
        with pytest.raises(ValueError):
            restarted.import_chunk(session, PROMPT[:13], data)
    for tokens, data in ((PROMPT[:12], first), (PROMPT[13:30], second)):  # wrong token count, wrong start
        with pytest.raises(ValueError):
            restarted.import_chunk(session, tokens, data)
    assert session.length == 0 and restarted.session_bytes(session) == 0
    restarted.import_chunk(session, PROMPT[:13], first)
    held = restarted.session_bytes(session)
    for data in (second[:-3], reframed(second, aux_cut=8), first):
        with pytest.raises(ValueError):
            restarted.import_chunk(session, PROMPT[13:30], data)
        assert session.length == 13 and restarted.session_bytes(session) == held
    restarted.import_chunk(session, PROMPT[13:30], second)
    assert close(restarted.prefill(session, PROMPT[30:], all_logits=True), reference[30:])
    runtime.release(source)


def tensor_bytes(value, seen: set) -> int:
    """The bytes of the storage of every tensor reachable from ``value`` (each storage once)."""
    if isinstance(value, torch.Tensor):
        storage = value.untyped_storage()
        if storage.data_ptr() in seen:
            return 0
        seen.add(storage.data_ptr())
        return storage.nbytes()
    if isinstance(value, dict):
        return sum(tensor_bytes(v, seen) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v, seen) for v in value)
    if attrs.has(type(value)):
        return sum(tensor_bytes(getattr(value, f.name), seen) for f in attrs.fields(type(value)))
    if hasattr(value, "__dict__"):
        return sum(tensor_bytes(v, seen) for v in vars(value).values())
    return 0


@pytest.fixture(scope="module")
def with_mtp(tmp_path_factory):
    directory = tmp_path_factory.mktemp("deepseek_v4_state_mtp")
    build_tiny_v4(directory)
    add_mtp_layer(directory)
    return load_tiny_v4(directory, speculative="mtp")


@pytest.mark.parametrize("which", ["plain", "mtp"])
def test_session_bytes_are_its_blocks_and_the_tensors_it_holds(request, which):
    runtime = request.getfixturevalue("runtime" if which == "plain" else "with_mtp")
    session = runtime.new_session()
    tokens = PROMPT + OTHER + PROMPT  # past the MTP layer's window and margin
    runtime.prefill(session, tokens[:100])
    for token in tokens[100:104]:
        runtime.decode([session], [token])
    assert_bytes_held(runtime, session)
    fork = runtime.fork(session, 18)
    runtime.truncate(session, 102)
    for held in (session, fork):
        assert_bytes_held(runtime, held)
    runtime.release(session)
    runtime.release(fork)


def assert_bytes_held(runtime, session):
    blocks = len(session.block_table) * runtime.pool.block_bytes
    assert runtime.session_bytes(session) == blocks + tensor_bytes(session.aux, set()) > blocks


def test_the_state_per_token_is_the_kv_rows_and_the_entries_far_below_the_raw_rows(runtime):
    arch = runtime.arch
    d, index, size = arch.head_dim, arch.index_dim, 4  # fp32
    raw_rows = (d + 4 * d + 4 * index) + (d + 2 * d) + d  # the old per-token rows: K=V plus raw projections
    per_token = runtime.state_bytes(10_000) / 10_000
    assert 3 * d * size < per_token < 3 * d * size + (d + index) * size / 4 + d * size / 8 + 1
    assert per_token * 3 < raw_rows * size
    session = runtime.new_session()
    runtime.prefill(session, PROMPT)
    assert len(runtime.export_chunk(session, 0, 37)) == runtime.CHUNK_HEADER_BYTES + runtime.state_bytes(37)
    runtime.release(session)
