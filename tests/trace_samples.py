"""The sample traces in ``scenarios/traces/``: synthetic rows in each real format.

No row comes from a real trace (their licences differ from des's); the shapes do: the
column names, units and value ranges checked against each dataset (see the format
modules in ``des/workload/formats/``). Regenerate on purpose with

    python -m tests.trace_samples

The tests read the committed files; they do not regenerate them.
"""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import datetime, timedelta

import numpy as np
import pandas as pd

from des.workload.formats.vllm_bench import write_vllm_bench
from tests.helpers import ROOT

TRACES = ROOT / "scenarios" / "traces"
BLOCK = 512


def lognormal_ints(rng: np.random.Generator, n: int, mean: float, sigma: float, lo: int, hi: int) -> np.ndarray:
    mu = math.log(mean) - sigma**2 / 2
    return np.clip(np.round(rng.lognormal(mu, sigma, n)), lo, hi).astype(int)


def mooncake(rng: np.random.Generator) -> str:
    """40 requests in 3-second batches (as the released conversation trace groups them), every
    prompt opening with block 0 (a system prompt), some continuing an earlier request's
    blocks (a chat's next turn), ids prefix-chained and numbered in order of first use."""
    lines = []
    next_id = 1
    earlier: list[tuple[int, list[int]]] = []  # (input_length, hash_ids) of earlier requests
    t = 0
    for i in range(40):
        if i and rng.random() < 0.35:
            t += 3000 + int(rng.integers(-2, 3))
        out = int(lognormal_ints(rng, 1, 300, 0.9, 1, 2000)[0])
        if earlier and rng.random() < 0.3:  # a follow-up: the earlier prompt's full blocks, then new ones
            base_len, base_ids = earlier[int(rng.integers(len(earlier)))]
            full = base_len // BLOCK
            length = full * BLOCK + int(rng.integers(200, 4000))
            ids = base_ids[:full]
        else:
            length = int(lognormal_ints(rng, 1, 6000, 0.8, 600, 24000)[0])
            ids = [0]
        while len(ids) < -(-length // BLOCK):
            ids.append(next_id)
            next_id += 1
        earlier.append((length, ids))
        lines.append(json.dumps({"timestamp": t, "input_length": length, "output_length": out, "hash_ids": ids}))
    return "\n".join(lines) + "\n"


def azure(rng: np.random.Generator) -> str:
    """40 requests of the 2023 release's shape: TIMESTAMP with seven fractional digits."""
    start = datetime(2023, 11, 16, 18, 15, 46, 680590)
    gaps = rng.gamma(0.25, 1 / (0.25 * 1.5), 40)  # bursty, 1.5 req/s
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
    t = start
    for i, gap in enumerate(gaps):
        if i:
            t += timedelta(microseconds=int(gap * 1e6))
        stamp = t.strftime("%Y-%m-%d %H:%M:%S.%f") + str(int(rng.integers(10)))
        w.writerow([stamp, int(lognormal_ints(rng, 1, 1000, 0.9, 2, 8000)[0]), int(rng.integers(6, 450))])
    return out.getvalue()


def burstgpt(rng: np.random.Generator) -> str:
    """40 requests of BurstGPT_1.csv's shape, four of them failed (Response tokens 0)."""
    out = io.StringIO()
    out.write("# Synthetic rows in BurstGPT's format (HPMLL/BurstGPT); 4 failed requests have Response tokens 0.\n")
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"])
    t = 5
    failed = set(rng.choice(np.arange(1, 40), 4, replace=False).tolist())
    for i in range(40):
        if i:
            t += int(rng.exponential(4.0))
        model = "GPT-4" if rng.random() < 0.25 else "ChatGPT"
        req = int(lognormal_ints(rng, 1, 600, 1.0, 1, 8000)[0])
        res = 0 if i in failed else int(lognormal_ints(rng, 1, 250, 0.8, 1, 2000)[0])
        log = "API log" if rng.random() < 0.3 else "Conversation log"
        w.writerow([t, model, req, res, req + res, log])
    return out.getvalue()


def vllm_bench(rng: np.random.Generator) -> str:
    """A --save-detailed result of 30 requests at about 4 req/s, two of them failed."""
    n = 30
    arrival = np.cumsum(rng.exponential(0.25, n))
    arrival -= arrival[0]
    prompt = lognormal_ints(rng, n, 512, 0.6, 16, 4000)
    output = lognormal_ints(rng, n, 64, 0.7, 2, 512)
    ttft = rng.uniform(0.03, 0.3, n)
    itl = [list(np.round(rng.uniform(0.015, 0.03, o - 1), 6)) for o in output]
    ok = np.ones(n, dtype=bool)
    ok[[7, 19]] = False
    frame = pd.DataFrame(
        {
            "arrival_time": np.round(arrival, 6),
            "prompt_tokens": prompt,
            "output_tokens": output,
            "ttft": np.round(ttft, 6),
            "e2e": np.round(ttft + np.array([sum(g) for g in itl]), 6),
            "itl": itl,
            "success": ok,
        }
    )
    path = TRACES / "vllm-bench-sample.json"
    meta = {"date": "20250101-000000", "model_id": "Qwen/Qwen2.5-7B-Instruct", "request_rate": 4.0}
    write_vllm_bench(frame, path, meta)
    return path.read_text()


def chat(rng: np.random.Generator) -> str:
    """Six chats of 2-5 turns under two system prompts (prefix groups 0: 300 tokens, 1: 800),
    and six one-off requests without either. Turn k's prompt holds turn k-1's prompt and
    answer and a new message."""
    rows: list[tuple[float, int, int, int | None, int | None, int | None]] = []
    system = {0: 300, 1: 800}
    for c in range(6):
        group = c % 2
        t = float(rng.uniform(0, 20))
        prompt = system[group] + int(rng.integers(20, 300))
        for _ in range(int(rng.integers(2, 6))):
            answer = int(lognormal_ints(rng, 1, 150, 0.6, 4, 800)[0])
            rows.append((round(t, 3), prompt, answer, c, group, system[group]))
            t += float(rng.uniform(8, 40))
            prompt += answer + int(rng.integers(10, 200))
    for _ in range(6):
        p = int(lognormal_ints(rng, 1, 400, 0.7, 8, 3000)[0])
        rows.append((round(float(rng.uniform(0, 60)), 3), p, int(rng.integers(8, 300)), None, None, None))
    rows.sort(key=lambda r: r[0])
    out = io.StringIO()
    out.write("# Synthetic chats: conversation_id groups a chat's turns, prefix_group its system prompt.\n")
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["arrival_time", "prompt_tokens", "output_tokens", "conversation_id", "prefix_group", "prefix_tokens"])
    for r in rows:
        w.writerow(["" if v is None else v for v in r])
    return out.getvalue()


def main() -> None:
    files = {
        "mooncake-sample.jsonl": mooncake,
        "azure-sample.csv": azure,
        "burstgpt-sample.csv": burstgpt,
        "vllm-bench-sample.json": vllm_bench,
        "chat-sample.csv": chat,
    }
    for i, (name, make) in enumerate(files.items()):
        text = make(np.random.default_rng(1000 + i))
        (TRACES / name).write_text(text)
        print(f"wrote scenarios/traces/{name}")


if __name__ == "__main__":
    main()
