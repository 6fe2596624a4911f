"""LastBatchMemo: one value per batch tensor, found again only for that very, unchanged tensor and the same key."""
import gc

import torch

from gea_graph.nn.batch_memo import LastBatchMemo


def test_the_value_is_kept_for_the_same_unchanged_tensor_and_key():
    builds = []
    memo = LastBatchMemo(lambda t, k: builds.append((t, k)) or (int(t.sum()), k))
    a = torch.arange(4)
    assert memo.get(a, 1) == (6, 1) and memo.get(a, 1) == (6, 1) and len(builds) == 1
    assert memo.get(a, 2) == (6, 2) and len(builds) == 2  # another key
    assert memo.get(a.clone(), 2) == (6, 2) and len(builds) == 3  # equal values, another tensor
    b = torch.arange(4)
    memo.get(b, 2)
    b.add_(1)  # changed in place
    assert memo.get(b, 2) == (10, 2) and len(builds) == 5
    memo.clear()
    memo.get(b, 2)
    assert len(builds) == 6
    with torch.inference_mode():  # no version counter: built at every call, never kept
        c = torch.arange(3)
        memo.get(c, 0)
        memo.get(c, 0)
    assert len(builds) == 8
    assert memo._entry[0]() is b  # the inference tensor replaced nothing
    assert "LastBatchMemo" in repr(memo)


def test_the_memo_keeps_no_tensor_alive():
    memo = LastBatchMemo(lambda t: t.numel())
    a = torch.zeros(3)
    memo.get(a)
    ref = memo._entry[0]
    del a
    gc.collect()
    assert ref() is None
    assert memo.get(torch.zeros(5)) == 5  # a dead entry is never found
