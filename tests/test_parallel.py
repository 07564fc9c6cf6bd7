"""Parallel splits (TP, PP, DP, ZeRO) and the interconnect catalog: every expected number derived in the body.

The model is ``test_training.gpt_decoder`` (float16, two bytes per element).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_training import FP16, analysed, cost_of, gpt_decoder

from graphcost.graph import TensorKind
from graphcost.hardware import catalog
from graphcost.hardware.catalog import HardwareError, resolve
from graphcost.hardware.interconnect import cluster, link, links, load_cluster, resolve_cluster
from graphcost.passes._blocks import find_blocks
from graphcost.passes.parallel import PRODUCTS, ParallelOptions, ParallelResult, parallel, ring_factor

L, B, S, H, A = 2, 2, 16, 64, 4


def split(**options: int) -> tuple[ParallelResult, object, dict[str, int]]:
    g = analysed(gpt_decoder(L, B, S, H, A))
    cost = cost_of(g)
    sizes: dict[str, int] = {}
    for n, t in g.graph.tensors().items():  # exact parameter bytes: elements × 2 (int64 plumbing is not float)
        if t.kind == TensorKind.PARAMETER and t.shape is not None:
            elems = 1
            for d in t.shape:
                elems *= int(d)
            sizes[n] = elems * (8 if t.dtype == "int64" else FP16)
    result = parallel(g.graph, cost, find_blocks(g.graph), ParallelOptions(**options), hardware=resolve("h100"),
                      cluster=cluster("dgx-h100"), parameter_bytes=sizes)
    return result, cost, sizes


def test_ring_factor() -> None:
    assert ring_factor(1) == 0.0  # nothing to reduce
    assert ring_factor(2) == 1.0  # 2·(2−1)/2
    assert ring_factor(8) == pytest.approx(2 * 7 / 8)


@pytest.mark.parametrize("t", [2, 4])
def test_tensor_parallel_splits_products_and_all_reduces_per_block(t: int) -> None:
    result, cost, _ = split(tensor=t)
    products = sum((n.forward_flops or 0) + (n.backward_flops or 0) for n in cost.nodes if n.op_type in PRODUCTS)
    others = cost.training_flops - products
    # per device: every product inside a block ÷ t, every other op replicated
    assert result.stage_flops == (pytest.approx(products / t + others),)
    [ar] = result.communication("TP")
    # Megatron: 2 all-reduces of s·b·h per block in forward (after attention and after the MLP), 2 more in backward
    assert ar.count == L * (2 + 2)
    assert ar.elements == S * B * H and ar.bytes == FP16 * S * B * H
    assert ar.moved_bytes == pytest.approx(ar.count * 2 * (t - 1) / t * FP16 * S * B * H)  # ring all-reduce
    assert ar.link == "nvlink4" and ar.time_s == pytest.approx(ar.moved_bytes / 450e9)  # inside one DGX node
    assert all(x.communication_time_s == pytest.approx(4 * 2 * (t - 1) / t * FP16 * S * B * H / 450e9)
               for x in result.layers)


def test_data_parallel_all_reduce_is_ring_factor_times_gradient_bytes() -> None:
    for n in (2, 8, 16):
        result, _, sizes = split(data=n)
        gradient_bytes = sum(v for k, v in sizes.items() if not k.endswith(("shape", "split")))  # floating params
        [ar] = result.communication("DP")
        assert ar.kind == "all-reduce" and ar.bytes == gradient_bytes
        assert ar.moved_bytes == pytest.approx(2 * (n - 1) / n * gradient_bytes)
        assert ar.link == ("nvlink4" if n <= 8 else "ib-ndr")  # 16 replicas span two 8-GPU nodes


def test_zero_stages_shard_state_gradients_then_parameters() -> None:
    n, k = 4, 2.0  # 4 replicas, Adam (2 × parameter bytes)
    base, _, sizes = split(data=n)
    params = sum(sizes.values())
    floating = sum(v for key, v in sizes.items() if not key.endswith(("shape", "split")))
    assert (base.parameters, base.gradients, base.optimizer_state) == (params, floating, k * floating)
    z1 = split(data=n, zero=1)[0]
    assert (z1.parameters, z1.gradients, z1.optimizer_state) == (params, floating, k * floating / n)
    z2 = split(data=n, zero=2)[0]
    assert (z2.gradients, z2.optimizer_state) == (floating // n, k * floating / n)
    assert z2.communication("DP")[0].moved_bytes == pytest.approx(2 * (n - 1) / n * floating)  # RS + AG: same bytes
    z3 = split(data=n, zero=3)[0]
    assert z3.parameters == params // n
    # ZeRO-3: all-gather the parameters in forward and again in backward, reduce-scatter the gradients
    assert z3.communication("DP")[0].moved_bytes == pytest.approx((n - 1) / n * (2 * params + floating))


@pytest.mark.parametrize("m", [1, 4, 8])
def test_pipeline_bubble_and_sends(m: int) -> None:
    p = 2
    result, _, _ = split(pipeline=p, micro_batches=m)
    assert result.bubble == pytest.approx((p - 1) / (m + p - 1))  # GPipe/1F1B bubble
    [send] = result.communication("PP")  # one stage boundary, before block h.1
    assert send.count == 2 * m  # activation forward + gradient backward, per micro-batch
    assert send.elements == S * B * H // m and send.bytes == FP16 * S * B * H // m
    assert len(result.stage_flops) == p and result.stage_flops[0] == pytest.approx(result.stage_flops[1])


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="tensor"):
        ParallelOptions(tensor=0)
    with pytest.raises(ValueError, match="ZeRO"):
        ParallelOptions(zero=4)


# ------------------------------------------------------------------------------------------------ interconnects
def test_catalog_links_have_sources_and_nvlink4_is_900_GBps_total() -> None:
    nv = link("nvlink-h200")
    assert nv.name == "nvlink4" and nv.bidirectional_bandwidth == 900e9 and nv.bandwidth == 450e9
    assert link("PCIe_Gen5").name == "pcie5" and link("pcie5").bandwidth == 63e9  # x16, per direction
    assert link("ib-ndr").bandwidth == 400e9 / 8 and link("ib-hdr").bandwidth == 200e9 / 8
    names = {x.name for x in links()}
    assert {"nvlink3", "nvlink4", "nvlink5", "pcie4", "pcie5", "ib-hdr", "ib-ndr", "roce-100g", "roce-400g"} <= names
    assert all(x.sources for x in links())
    assert not names & {s.name for s in catalog.list_specs()}  # links are not loaded as devices


def test_cluster_file_and_errors(tmp_path: Path) -> None:
    good = tmp_path / "c.toml"
    good.write_text('[[cluster]]\nname = "mine"\ndevices_per_node = 4\nintra = "pcie4"\n'
                    'inter = { bandwidth = "10GB/s" }\n')
    c = load_cluster(good)
    assert (c.devices_per_node, c.intra.name, c.inter.bandwidth) == (4, "pcie4", 10e9)
    assert c.link_for(4).name == "pcie4" and c.link_for(5).bandwidth == 10e9  # 5 devices span two nodes
    assert resolve_cluster(str(good)).name == "mine" and resolve_cluster(None).name == "dgx-h100"
    for text, needle in (('[[cluster]]\nname="x"\ndevices_per_node=0\nintra="pcie4"\ninter="pcie4"\n', "devices_per"),
                         ('[[cluster]]\nname="x"\ndevices_per_node=2\nintra="warp"\ninter="pcie4"\n', "unknown inter"),
                         ("not = [toml", "invalid TOML"), ('[[cluster]]\nname="x"\nbogus=1\n', "bogus")):
        bad = tmp_path / "bad.toml"
        bad.write_text(text)
        with pytest.raises(HardwareError, match=needle):
            load_cluster(bad)
    with pytest.raises(HardwareError, match="cannot read"):
        load_cluster(tmp_path / "missing.toml")
