"""kvstore.arguments: MXNet-style argument normalisation, and checks skipped only for the
very arrays that passed them last."""
import mxnet as mx
import pytest

from netstorm.kvstore.arguments import ArgumentChecks, check_arrays, group, sparse_outs


def test_keys_and_values_are_grouped_like_mxnet_does():
    a, b = mx.nd.zeros(2), mx.nd.ones(2)
    assert group(3, a, "push") == [(3, [a])]
    assert group([1, 2], [a, [a, b]], "push") == [(1, [a]), (2, [a, b])]
    with pytest.raises(ValueError, match="push: 2 keys need a list of 2 values"):
        group([1, 2], [a], "push")


def test_arrays_are_checked_for_type_and_storage():
    with pytest.raises(TypeError, match="pull of key 0: expected mxnet NDArray, got list"):
        check_arrays([[1, 2]], "pull of key 0")
    with pytest.raises(ValueError, match="supports dense and row_sparse arrays, got csr"):
        check_arrays([mx.nd.zeros((2, 2)).tostype("csr")], "push")
    sparse = mx.nd.zeros(2).tostype("row_sparse")
    assert sparse_outs([sparse, mx.nd.zeros(2)], True, "pull")[0].stype == "default"
    with pytest.raises(mx.base.MXNetError, match="use row_sparse_pull"):
        sparse_outs([sparse], False, "pull")


def test_checks_run_again_for_any_other_array_key_or_method():
    checks, runs = ArgumentChecks(), []

    def check(result):
        return lambda: runs.append(result) or result
    a, b = mx.nd.zeros(2), mx.nd.zeros(2)
    assert checks.once("pushpull", 0, [a, b], check(1)) == 1
    assert checks.once("pushpull", 0, [a, b], check(2)) == 1        # skipped
    assert checks.once("pushpull", 0, [a, a], check(3)) == 3        # another array
    assert checks.once("pushpull", 0, [a], check(4)) == 4           # fewer arrays
    assert checks.once("pushpull", 1, [a], check(5)) == 5           # another key
    assert checks.once("push", 1, [a], check(6)) == 6               # another method
    assert checks.once("pushpull", (1,), [a], check(7)) == 7        # never kept
    assert checks.once("pushpull", (1,), [a], check(8)) == 8
    assert runs == [1, 3, 4, 5, 6, 7, 8]
