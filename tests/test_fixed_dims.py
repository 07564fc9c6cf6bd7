"""Dims an operator's contract fixes (``binding.sizes_the_ops_fix``): taken at that size, not defaulted to 1.

onnxruntime-genai's builder declares the KV cache ``[batch_size, kv_heads, past_sequence_length, kv_cache_dim]``,
the last axis left symbolic so that one export also serves a compressed cache. For an uncompressed cache the
attention op (GroupQueryAttention) or the Concat that appends the new keys (the MultiHeadAttention graphs) fixes it
to the head size; at the default of 1 the cache's bytes came out 16x low (a probe of genai's llama, qwen2, phi3).
"""

from __future__ import annotations

import onnx
import onnx.helper as oh
from onnx import TensorProto

import graphcost
from graphcost.analysis import Analysis

HEADS, KV_HEADS, HEAD = 4, 2, 16
HIDDEN = (HEADS + 2 * KV_HEADS) * HEAD  # packed QKV


def _gqa(cache_type: int = TensorProto.FLOAT) -> onnx.ModelProto:
    past = ["batch", KV_HEADS, "past", "kv_cache_dim"]
    node = oh.make_node("GroupQueryAttention", ["qkv", "", "", "past_key", "past_value", "seqlens_k", "total"],
                        ["out", "present_key", "present_value"], name="gqa", domain="com.microsoft",
                        num_heads=HEADS, kv_num_heads=KV_HEADS)
    g = oh.make_graph([node], "decoder", [
        oh.make_tensor_value_info("qkv", TensorProto.FLOAT, ["batch", "seq", HIDDEN]),
        oh.make_tensor_value_info("past_key", cache_type, past),
        oh.make_tensor_value_info("past_value", cache_type, past),
        oh.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["batch"]),
        oh.make_tensor_value_info("total", TensorProto.INT32, [])],
        [oh.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", "seq", HEADS * HEAD]),
         oh.make_tensor_value_info("present_key", cache_type, ["batch", KV_HEADS, "total_seq", "kv_cache_dim"]),
         oh.make_tensor_value_info("present_value", cache_type, ["batch", KV_HEADS, "total_seq", "kv_cache_dim"])])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)])


def _concat_cache() -> onnx.ModelProto:
    g = oh.make_graph([oh.make_node("Concat", ["past_key", "k"], ["present_key"], name="append", axis=2)], "decoder",
                      [oh.make_tensor_value_info("past_key", TensorProto.FLOAT, ["batch", 2, "past", "kv_cache_dim"]),
                       oh.make_tensor_value_info("k", TensorProto.FLOAT, ["batch", 2, "seq", HEAD])],
                      [oh.make_tensor_value_info("present_key", TensorProto.FLOAT, None)])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def test_group_query_attention_fixes_its_cache_to_the_head_size() -> None:
    a = Analysis.of(_gqa())
    assert a.binding.values["kv_cache_dim"] == HIDDEN // (HEADS + 2 * KV_HEADS) == HEAD
    assert "kv_cache_dim" not in a.binding.defaulted and "kv_cache_dim" in a.binding.taken
    r = graphcost.analyze(_gqa(), dims={"batch": 1, "seq": 1, "past": 100})
    assert r.binding["kv_cache_dim"] == HEAD and "kv_cache_dim" not in r.defaulted_dims
    assert any("kv_cache_dim = 16" in w.message and "head size 16" in w.message for w in r.warnings)


def test_a_concat_with_the_new_keys_fixes_the_cache_dim() -> None:
    a = Analysis.of(_concat_cache())
    assert a.binding.values["kv_cache_dim"] == HEAD and a.binding.defaulted == ("batch", "past", "seq")
    r = graphcost.analyze(_concat_cache(), dims={"batch": 1, "past": 7, "seq": 1})
    assert r.nodes[0].bytes_written == 1 * 2 * 1 * HEAD * 4  # the appended row, in place, at head size 16


def test_a_compressed_cache_is_not_sized_by_the_query() -> None:
    a = Analysis.of(_gqa(cache_type=TensorProto.INT8))  # not the query's type: a quantized cache may be packed
    assert "kv_cache_dim" in a.binding.defaulted


def test_a_given_size_that_contradicts_the_contract_is_kept_and_said() -> None:
    r = graphcost.analyze(_gqa(), dims={"kv_cache_dim": 3})
    assert r.binding["kv_cache_dim"] == 3
    assert any("kv_cache_dim = 3 as given" in w.message and "head size 16" in w.message for w in r.warnings)
