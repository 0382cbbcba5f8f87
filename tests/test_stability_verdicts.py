"""How often a split's decode pool held its KV transfers back (issue #17, item 12)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest


def test_decode_blocked_share_is_the_time_some_link_waited_idle_for_decode_blocks():
    # link 0: a transfer queued at 1 starts at 3 (blocked 1-3), the next queued at 2 waits
    # behind it on the link until 3.5, then for blocks until 5 (blocked 3.5-5); link 1:
    # blocked 4-6 (overlapping link 0's 4-5). Union: [1, 3) + [3.5, 6) = 4.5 s of [0, 10].
    from des.metrics.pools import decode_blocked_share

    transfers = pd.DataFrame(
        {
            "request_id": [0, 1, 2],
            "link": [0, 0, 1],
            "decode_instance": [2, 2, 2],
            "enqueued": [1.0, 2.0, 4.0],
            "start": [3.0, 5.0, 6.0],
            "end": [3.5, 5.5, 6.5],
            "bytes": [1, 1, 1],
        }
    )
    requests = pd.DataFrame(
        {
            "status": ["completed"] * 3,
            "transfer_start": [3.0, 5.0, 6.0],
            "first_token_time": [1.0, 2.0, 4.0],
            "output_tokens": [10, 10, 10],
            "prefill_instance": [0, 0, 1],
        }
    )
    assert decode_blocked_share(transfers, requests, 0.0, 10.0, 10.0, True) == pytest.approx(0.45)
    # a request still waiting on link 1 when the run stops at 10 (prefilled at 8): blocked 8-10
    waiting = pd.concat(
        [
            requests,
            pd.DataFrame(
                {
                    "status": ["unfinished"],
                    "transfer_start": [np.nan],
                    "first_token_time": [8.0],
                    "output_tokens": [10],
                    "prefill_instance": [1],
                }
            ),
        ],
        ignore_index=True,
    )
    assert decode_blocked_share(transfers, waiting, 0.0, 10.0, 10.0, True) == pytest.approx(0.65)
    assert decode_blocked_share(transfers, waiting, 0.0, 10.0, 10.0, False) == pytest.approx(0.45)
    assert decode_blocked_share(transfers, requests, 5.0, 5.0, 10.0, True) is None
