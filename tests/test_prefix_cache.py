"""Automatic prefix caching: block identity, LRU eviction, reference counts, and what a
preempted request recomputes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import des
from des.engine.content import BlockKeys
from des.engine.prefix_cache import PrefixCache
from des.engine.request import Request


def request(rid: int, prompt: int, output: int = 8, segments=None) -> Request:
    return Request(rid, 0.0, prompt, output, segments=segments)


# -- block identity -----------------------------------------------------------------


def test_keys_chain_over_the_prefix_and_only_equal_prefixes_share_them():
    a = BlockKeys(((1, 40), (2, 24)), 16).upto(4)
    b = BlockKeys(((1, 40), (3, 24)), 16).upto(4)
    c = BlockKeys(((9, 16), (1, 24), (2, 24)), 16).upto(4)
    assert a[:2] == b[:2] and a[2:] != b[2:]  # blocks 0-1 are content 1 alone; block 2 mixes in 2 or 3
    assert not set(a) & set(c)  # the same content at other positions is other blocks
    assert BlockKeys(((1, 40), (2, 24)), 16).upto(4) == a  # deterministic
    assert BlockKeys(((1, 40), (2, 24)), 8).upto(2) != a[:2]  # block size is part of identity


def test_a_conversation_turn_begins_with_the_previous_turn_whole_sequence():
    first = request(0, 100, 30, segments=((7, 100),))
    first.answer_id = 8
    second = request(1, 100 + 30 + 50, 20, segments=((7, 100), (8, 30), (9, 50)))
    n = 130 // 16  # full blocks of turn 1's prompt and answer
    assert first.block_keys(16).upto(n)[:n] == second.block_keys(16).upto(n)[:n]


# -- the cache ------------------------------------------------------------------------


def check_invariants(kv: PrefixCache, anonymous_in_use: int = 0) -> None:
    """Reference counts never negative; the free queue's live entries are the free blocks;
    used + cached-free + uncached-free = total; the cache map points at blocks holding
    the content it names."""
    assert all(r >= 0 for r in kv.ref.values()), "negative reference count"
    live_named = [b for b, v in kv.queue if b >= 0 and kv.version.get(b) == v]
    uncached_free = sum(-b for b, _ in kv.queue if b < 0)
    assert len(live_named) == len(set(live_named)) == kv.cached_free
    assert all(kv.ref[b] == 0 for b in live_named), "a block in use is in the free queue"
    named_in_use = sum(1 for r in kv.ref.values() if r > 0)
    assert kv.free == kv.cached_free + uncached_free
    assert named_in_use + anonymous_in_use == kv.used == kv.num_blocks - kv.free
    assert kv.used + kv.cached_free + uncached_free == kv.num_blocks
    for k, b in kv.cached.items():
        assert kv.key[b] == k, "the cache map points at a block holding other content"
    assert sum(kv.ref.values()) == sum(len(v) for v in kv.owned.values()), "references do not match holders"


def test_freed_blocks_are_evicted_least_recently_freed_first_tail_before_head():
    kv = PrefixCache(6, 4)
    a, b = request(0, 8, segments=((1, 8),)), request(1, 8, segments=((2, 8),))
    for r in (a, b):
        kv.take(2)
        kv.commit(r, 8)
    check_invariants(kv)
    kv.hold(a.id, 2)
    kv.release(a.id)  # a's blocks join the queue, tail first, after the two never used
    kv.hold(b.id, 2)
    kv.release(b.id)
    check_invariants(kv)
    assert kv.cached_free == 4
    kv.take(3)  # the two never used, then a's tail block: a loses its second block
    assert kv.lookup(request(10, 9, segments=((1, 8), (3, 1))), 9)[0] == 4
    assert kv.lookup(request(11, 9, segments=((2, 8), (3, 1))), 9)[0] == 8
    check_invariants(kv, anonymous_in_use=3)


def test_a_touched_free_block_leaves_the_queue_and_returns_at_its_tail():
    kv = PrefixCache(3, 4)
    a = request(0, 8, segments=((1, 8),))
    kv.take(2)
    kv.commit(a, 8)
    kv.hold(a.id, 2)
    kv.release(a.id)
    again = request(1, 9, segments=((1, 8), (2, 1)))
    hit, found, evictable = kv.lookup(again, 9)
    assert (hit, evictable) == (8, 2)
    kv.touch(again.id, found)
    check_invariants(kv)
    assert kv.free == 1
    kv.hold(again.id, 2)
    kv.release(again.id)
    kv.take(1)  # the block never used, not the ones just freed
    assert kv.lookup(request(2, 9, segments=((1, 8), (2, 1))), 9)[0] == 8
    check_invariants(kv, anonymous_in_use=1)


def test_a_fully_cached_prompt_still_computes_its_last_token():
    kv = PrefixCache(8, 4)
    r = request(0, 12, segments=((1, 12),))
    kv.take(3)
    kv.commit(r, 12)
    kv.hold(r.id, 3)
    kv.release(r.id)
    again = request(1, 12, segments=((1, 12),))
    hit, blocks, evictable = kv.lookup(again, 12)
    assert (hit, len(blocks), evictable) == (8, 2, 2)  # at most 11 tokens: 2 full blocks


def test_the_ledger_admits_a_request_on_the_blocks_it_holds_and_preemption_keys_them():
    kv = PrefixCache(10, 4)
    a = request(0, 8, segments=((1, 8),))
    kv.take(2)
    kv.commit(a, 8)
    kv.hold(a.id, 2)  # a transferred prompt arrives holding its 2 blocks
    assert kv.lookup(a, 9) == (0, (), 0)  # it holds its KV here: nothing to look up
    assert kv.allocate(a.id, 9)  # 9 tokens need 3 blocks: it holds 2, one is taken
    assert (kv.free, kv.held) == (7, {})
    big = request(1, 40)
    assert not kv.allocate(big.id, 40) and kv.free == 7  # 10 blocks do not fit in 7: nothing taken
    kv.preempt(a, 9)  # its 2 full blocks stay cached, all 3 are freed
    assert kv.free == 10
    again = request(2, 12, segments=((1, 8), (5, 4)))
    assert kv.lookup(again, 12)[:1] == (8,)
    check_invariants(kv)


@st.composite
def operations(draw):
    return draw(
        st.lists(
            st.tuples(
                st.sampled_from(["admit", "grow", "release"]),
                st.integers(0, 5),  # request slot
                st.integers(1, 40),  # tokens
                st.integers(0, 2),  # shared prefix
            ),
            min_size=1,
            max_size=60,
        )
    )


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(operations(), st.integers(3, 12))
def test_reference_counts_and_block_accounting_hold_after_every_operation(ops, num_blocks):
    kv = PrefixCache(num_blocks, 4)
    live: dict[int, tuple[Request, int, int]] = {}  # slot -> (request, tokens computed, blocks)
    next_id = 0
    for op, slot, tokens, prefix in ops:
        if op == "admit" and slot not in live:
            r = request(next_id, tokens, 10, segments=((prefix, min(tokens, 12)), (100 + next_id, 40)))
            next_id += 1
            found = kv.lookup(r, tokens)
            free = kv.free
            if not kv.allocate(r.id, tokens, found):
                assert kv.free == free, "a refused allocation took blocks"
                continue
            kv.commit(r, tokens)
            live[slot] = (r, tokens, -(-tokens // 4))
        elif op == "grow" and slot in live:
            r, done, held = live[slot]
            more = min(tokens, r.prompt_tokens + r.output_tokens - done)
            need = -(-(done + more) // 4) - held
            if need > kv.free:
                continue
            kv.take(need)
            kv.commit(r, done + more)
            live[slot] = (r, done + more, held + need)
        elif op == "release" and slot in live:
            r, _, held = live.pop(slot)
            kv.hold(r.id, held)
            kv.release(r.id)
        check_invariants(kv, anonymous_in_use=sum(h - len(kv.owned.get(r.id, [])) for r, _, h in live.values()))
    for r, _, held in live.values():
        kv.hold(r.id, held)
        kv.release(r.id)
    check_invariants(kv)
    assert kv.free == kv.num_blocks and not kv.held


# -- preemption in the engine -----------------------------------------------------------


def trace(tmp_path: Path, rows, **sched):
    path = tmp_path / "trace.csv"
    path.write_text("arrival_time,prompt_tokens,output_tokens\n" + "".join(f"{a},{p},{o}\n" for a, p, o in rows))
    return des.load_scenario(
        {
            "workload": {"arrival": {"process": "trace", "path": str(path)}},
            "cost_model": {"kind": "constant", "step_time": 1.0},
            "scheduler": {"kind": "continuous", "block_size": 4, **sched},
        }
    )


def test_a_preempted_request_readmitted_before_eviction_computes_only_what_was_lost(tmp_path):
    # 5 blocks of 4 tokens; A and B (prompt 4, output 6) need a third block each at t = 5:
    # B is preempted holding 8 computed tokens in 2 full, cached blocks; A finishes at 6
    # and B, re-admitted, finds both: it computes 1 token instead of 9 and ends at 7
    r = des.simulate(trace(tmp_path, [(0, 4, 6), (0, 4, 6)], num_gpu_blocks_override=5))
    assert r.requests["preemptions"].tolist() == [0, 1]
    last = r.steps.iloc[-1]
    assert (last["start"], last["prefill_tokens"] + last["decode_tokens"], last["cached_tokens"]) == (6.0, 1, 8)
    assert r.requests["finish_time"].tolist() == [6.0, 7.0]
    assert r.requests["cached_tokens"].tolist() == [0, 8]


def test_after_eviction_a_preempted_request_computes_everything_again(tmp_path):
    # 4 blocks: A (output 10) grows into both blocks B left behind when preempted at t = 5
    r = des.simulate(trace(tmp_path, [(0, 4, 10), (0, 4, 6)], num_gpu_blocks_override=4))
    last = r.steps.iloc[-1]
    assert (last["start"], last["prefill_tokens"], last["cached_tokens"]) == (10.0, 9, 0)
    assert r.requests["finish_time"].tolist() == [10.0, 11.0]


@pytest.mark.parametrize("caching", [True, False])
def test_caching_off_recomputes_everything(tmp_path, caching):
    r = des.simulate(trace(tmp_path, [(0, 4, 6), (0, 4, 6)], num_gpu_blocks_override=5, enable_prefix_caching=caching))
    last = r.steps.iloc[-1]
    assert last["prefill_tokens"] + last["decode_tokens"] == (1 if caching else 9)
