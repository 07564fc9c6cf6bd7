"""The wire scanner must give onnx.load's model, except that large payloads stay in the file.

Every test compares against ``onnx.load`` of the same file: structure (with all tensor data cleared on
both sides) must serialize identically, kept tensors byte for byte, stripped tensors value for value.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

from graphcost import _scan
from graphcost._scan import FIELDS_ENCODING, ScanError, load_structure, read_external_payload, read_structure

REPO = Path(__file__).resolve().parents[1]
BIG = 4096  # elements: every "large" tensor below is >= 4 KiB, far above the 1 KiB default threshold
_DATA_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "raw_data", "double_data", "uint64_data")


# ---------------------------------------------------------------------------------------------------------
# helpers


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _ld(field: int, body: bytes) -> bytes:
    """A length-delimited protobuf record."""
    return _varint(field << 3 | 2) + _varint(len(body)) + body


def _graph_tensors(g: onnx.GraphProto) -> Iterator[TensorProto]:
    yield from g.initializer
    for s in g.sparse_initializer:
        yield s.values
        yield s.indices
    for n in g.node:
        for a in n.attribute:
            yield from _attr_tensors(a)


def _attr_tensors(a: onnx.AttributeProto) -> Iterator[TensorProto]:
    if a.HasField("t"):
        yield a.t
    yield from a.tensors
    single = [a.sparse_tensor] if a.HasField("sparse_tensor") else []
    for s in [*single, *a.sparse_tensors]:
        yield s.values
        yield s.indices
    if a.HasField("g"):
        yield from _graph_tensors(a.g)
    for g in a.graphs:
        yield from _graph_tensors(g)


def _model_tensors(m: onnx.ModelProto) -> Iterator[TensorProto]:
    """Every tensor a model holds, in a fixed order, wherever it sits (subgraphs, functions, training)."""
    yield from _graph_tensors(m.graph)
    for ti in m.training_info:
        yield from _graph_tensors(ti.initialization)
        yield from _graph_tensors(ti.algorithm)
    for f in m.functions:
        for n in f.node:
            for a in n.attribute:
                yield from _attr_tensors(a)
        for a in f.attribute_proto:
            yield from _attr_tensors(a)


def _structure_bytes(m: onnx.ModelProto) -> bytes:
    """The model with all tensor data and data locations cleared: what the scanner must keep exactly."""
    c = onnx.ModelProto()
    c.CopyFrom(m)
    for t in _model_tensors(c):
        for f in (*_DATA_FIELDS, "external_data", "data_location"):
            t.ClearField(f)
    return c.SerializeToString(deterministic=True)


def _is_ours(t: TensorProto, path: str) -> bool:
    locations = [e.value for e in t.external_data if e.key == "location"]
    return t.data_location == TensorProto.EXTERNAL and locations == [os.path.basename(os.path.realpath(path))]


def _encoding(t: TensorProto) -> str | None:
    values = [e.value for e in t.external_data if e.key == "encoding"]
    return values[-1] if values else None


def _check_against_onnx(path: str | Path, keep: int = 1024) -> tuple[onnx.ModelProto, set[str]]:
    """Compare the scanner's model with ``onnx.load``'s; returns it and the names of tensors it stripped."""
    path = str(path)
    full = onnx.load(path)  # external data loaded: the values
    on_disk = onnx.load(path, load_external_data=False)  # as stored: what kept tensors must equal
    reduced = load_structure(path, keep)
    base_dir = os.path.dirname(os.path.realpath(path))
    stripped: set[str] = set()
    triples = zip(_model_tensors(full), _model_tensors(on_disk), _model_tensors(reduced), strict=True)
    for want, stored, got in triples:
        assert (got.name, list(got.dims), got.data_type) == (want.name, list(want.dims), want.data_type)
        if _is_ours(got, path) and not _is_ours(stored, path):
            stripped.add(got.name)
            np.testing.assert_array_equal(read_external_payload(got, base_dir), nh.to_array(want))
            if _encoding(got) is None:  # raw layout: onnx's own loader must read it too
                loaded = TensorProto()
                loaded.CopyFrom(got)
                onnx.external_data_helper.load_external_data_for_tensor(loaded, base_dir)
                np.testing.assert_array_equal(nh.to_array(loaded), nh.to_array(want))
        else:
            assert got.SerializeToString() == stored.SerializeToString(), got.name
    assert _structure_bytes(reduced) == _structure_bytes(full)
    return reduced, stripped


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           initializers: Sequence[TensorProto] = ()) -> onnx.ModelProto:
    g = h.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return h.make_model(g, opset_imports=[h.make_opsetid("", 18)])


def _f32(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return h.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _rand(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


# ---------------------------------------------------------------------------------------------------------
# what gets stripped, and how it reads back


def test_initializers_each_storage_form(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inits = [
        nh.from_array(_rand(BIG).reshape(64, 64), "raw_f32"),  # raw_data
        h.make_tensor("float_f32", TensorProto.FLOAT, [64, 64], _rand(BIG, 1).tolist()),  # packed float_data
        h.make_tensor("double_f64", TensorProto.DOUBLE, [BIG], np.arange(BIG) / 7.0),  # packed double_data
        h.make_tensor("int64s", TensorProto.INT64, [BIG], np.arange(BIG) * 1000 - 5),  # varint int64_data
        h.make_tensor("int32s", TensorProto.INT32, [BIG], np.arange(BIG) - 9),  # varint int32_data
        h.make_tensor("uint64s", TensorProto.UINT64, [BIG], np.arange(BIG) << 40),  # varint uint64_data
        h.make_tensor("halfs", TensorProto.FLOAT16, [BIG], _rand(BIG, 2).astype(np.float16)),  # int32_data bits
        h.make_tensor("small_i64", TensorProto.INT64, [2], [1, -1]),  # kept
        nh.from_array(np.ones(8, np.float32), "small_raw"),  # kept
    ]
    nodes = [h.make_node("Identity", [t.name], [f"o{i}"]) for i, t in enumerate(inits)]
    outs = [h.make_tensor_value_info(f"o{i}", t.data_type, list(t.dims)) for i, t in enumerate(inits)]
    path = tmp_path / "inits.onnx"
    onnx.save(_model(nodes, [], outs, inits), path)

    reduced, stripped = _check_against_onnx(path)

    assert stripped == {t.name for t in inits} - {"small_i64", "small_raw"}
    by_name = {t.name: t for t in reduced.graph.initializer}
    assert {n for n in stripped if _encoding(by_name[n]) is None} == {"raw_f32", "float_f32", "double_f64"}
    assert {n for n in stripped if _encoding(by_name[n]) == FIELDS_ENCODING} == {"int64s", "int32s", "uint64s", "halfs"}
    raw = by_name["raw_f32"]
    offset, length = (int(e.value) for e in raw.external_data if e.key in ("offset", "length"))
    assert path.read_bytes()[offset : offset + length] == inits[0].raw_data  # an absolute offset into the file
    assert len(reduced.SerializeToString()) < 2000  # 9 tensors, ~130 KB of payload, all but names gone
    monkeypatch.chdir(tmp_path)  # the in-memory checker resolves external locations against the cwd
    onnx.checker.check_model(reduced, full_check=True)


def test_constant_attribute_and_if_subgraphs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    then_g = h.make_graph([h.make_node("Identity", ["T"], ["t_out"])], "then", [], [_f32("t_out", [BIG])],
                          [nh.from_array(_rand(BIG, 3), "T")])
    else_g = h.make_graph([h.make_node("Identity", ["E"], ["e_out"])], "else", [], [_f32("e_out", [BIG])],
                          [nh.from_array(_rand(BIG, 4), "E")])
    nodes = [
        h.make_node("Constant", [], ["c"], name="const", value=nh.from_array(_rand(BIG, 5), "c_value")),
        h.make_node("Constant", [], ["shape"], value=nh.from_array(np.array([64, 64], np.int64))),  # kept
        h.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_g, else_branch=else_g),
        h.make_node("Add", ["y", "c"], ["z"]),
        h.make_node("Reshape", ["z", "shape"], ["out"]),
    ]
    path = tmp_path / "if.onnx"
    onnx.save(_model(nodes, [h.make_tensor_value_info("cond", TensorProto.BOOL, [])], [_f32("out", [64, 64])]), path)

    reduced, stripped = _check_against_onnx(path)

    assert stripped == {"c_value", "T", "E"}
    monkeypatch.chdir(tmp_path)
    onnx.checker.check_model(reduced, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(reduced, strict_mode=True)  # the kept shape tensor is enough
    assert [d.dim_value for d in inferred.graph.output[0].type.tensor_type.shape.dim] == [64, 64]


def test_sparse_initializer_local_function_and_training_info(tmp_path: Path) -> None:
    nnz = BIG
    sparse = h.make_sparse_tensor(
        nh.from_array(_rand(nnz, 6), "sp"),  # values: raw
        h.make_tensor("sp_idx", TensorProto.INT64, [nnz], np.arange(nnz) * 3),  # indices: int64_data
        [3 * nnz],
    )
    func = h.make_function(
        "local", "AddBig", ["a"], ["b"],
        [h.make_node("Constant", [], ["k"], value=nh.from_array(_rand(BIG, 7), "k_value")),
         h.make_node("Add", ["a", "k"], ["b"])],
        [h.make_opsetid("", 18)],
    )
    init_g = h.make_graph([h.make_node("Identity", ["w0"], ["w_init"])], "init", [], [_f32("w_init", [BIG])],
                          [nh.from_array(_rand(BIG, 8), "w0")])
    algo_g = h.make_graph([h.make_node("Identity", ["x"], ["x2"])], "algo", [_f32("x", [BIG])], [_f32("x2", [BIG])])
    g = h.make_graph([h.make_node("AddBig", ["x"], ["y"], domain="local")], "g", [_f32("x", [BIG])],
                     [_f32("y", [BIG])], sparse_initializer=[sparse])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 18), h.make_opsetid("local", 1)], functions=[func])
    model.training_info.append(h.make_training_info(algo_g, [], init_g, []))
    path = tmp_path / "misc.onnx"
    onnx.save(model, path)

    _, stripped = _check_against_onnx(path)

    assert stripped == {"sp", "sp_idx", "k_value", "w0"}


def test_string_tensors(tmp_path: Path) -> None:
    words = [f"word-{i}-ü".encode() for i in range(BIG)]
    inits = [TensorProto(name="vocab", data_type=TensorProto.STRING, dims=[BIG], string_data=words),
             TensorProto(name="few", data_type=TensorProto.STRING, dims=[2], string_data=[b"a", b"b"])]
    nodes = [h.make_node("Identity", ["vocab"], ["o0"]), h.make_node("Identity", ["few"], ["o1"])]
    outs = [h.make_tensor_value_info("o0", TensorProto.STRING, [BIG]),
            h.make_tensor_value_info("o1", TensorProto.STRING, [2])]
    path = tmp_path / "strings.onnx"
    onnx.save(_model(nodes, [], outs, inits), path)

    reduced, stripped = _check_against_onnx(path)

    assert stripped == {"vocab"}
    assert _encoding(reduced.graph.initializer[0]) == FIELDS_ENCODING
    assert read_external_payload(reduced.graph.initializer[0], str(tmp_path))[-1] == f"word-{BIG - 1}-ü"


def test_unpacked_and_split_records_are_stripped_as_records(tmp_path: Path) -> None:
    """Legal but unusual encodings (no known exporter writes them) still read back through the records."""
    # TensorProto: dims 1, data_type 2, int64_data 7 one varint record per element (wire type 0), name 8.
    unpacked = _varint(1 << 3) + _varint(BIG) + _varint(2 << 3) + _varint(TensorProto.INT64)
    unpacked += b"".join(_varint(7 << 3) + _varint(i * 77) for i in range(BIG)) + _ld(8, b"unpacked")
    # float_data 4 packed, split into two records, which parsers concatenate.
    values = _rand(BIG, 9)
    split = _varint(1 << 3) + _varint(BIG) + _varint(2 << 3) + _varint(TensorProto.FLOAT)
    split += _ld(4, values[: BIG // 2].tobytes()) + _ld(4, values[BIG // 2 :].tobytes()) + _ld(8, b"split")
    model = _model([h.make_node("Identity", ["unpacked"], ["o0"]), h.make_node("Identity", ["split"], ["o1"])], [],
                   [h.make_tensor_value_info("o0", TensorProto.INT64, [BIG]), _f32("o1", [BIG])])
    data = model.SerializeToString()
    graph = model.graph.SerializeToString() + _ld(5, unpacked) + _ld(5, split)  # appending = merging fields
    path = tmp_path / "odd.onnx"
    path.write_bytes(data + _ld(7, graph))
    assert onnx.load(str(path)).graph.initializer[0].int64_data[5] == 5 * 77

    reduced, stripped = _check_against_onnx(path)

    assert stripped == {"unpacked", "split"}
    assert {_encoding(t) for t in reduced.graph.initializer} == {FIELDS_ENCODING}


def test_already_external_model_passes_through(tmp_path: Path) -> None:
    def save(ints: TensorProto, name: str) -> Path:
        model = _model([h.make_node("Identity", ["w"], ["o0"]), h.make_node("Identity", ["i"], ["o1"])], [],
                       [_f32("o0", [BIG]), h.make_tensor_value_info("o1", TensorProto.INT64, [BIG])],
                       [nh.from_array(_rand(BIG, 10), "w"), ints])
        onnx.save(model, tmp_path / name, save_as_external_data=True, location=name + ".data", size_threshold=0)
        return tmp_path / name

    all_raw = save(nh.from_array(np.arange(BIG), "i"), "ext.onnx")
    _, stripped = _check_against_onnx(all_raw)
    assert stripped == set()
    assert read_structure(all_raw) == all_raw.read_bytes()  # nothing to strip: every byte copied, lengths intact
    reduced = load_structure(all_raw)
    np.testing.assert_array_equal(read_external_payload(reduced.graph.initializer[0], str(tmp_path)), _rand(BIG, 10))

    # onnx externalizes raw_data only, so an int64_data tensor stays embedded: that one is ours to strip.
    mixed = save(h.make_tensor("i", TensorProto.INT64, [BIG], np.arange(BIG)), "mixed.onnx")
    _, stripped = _check_against_onnx(mixed)
    assert stripped == {"i"}


def test_keep_threshold_bounds(tmp_path: Path) -> None:
    inits = [nh.from_array(_rand(BIG), "w"), h.make_tensor("s", TensorProto.INT64, [3], [1, 2, 3])]
    model = _model([h.make_node("Add", ["w", "s"], ["o"])], [], [_f32("o", [BIG])], inits)
    path = tmp_path / "k.onnx"
    onnx.save(model, path)
    assert read_structure(path, keep_bytes=10**9) == path.read_bytes()  # nothing long enough to strip
    _, stripped = _check_against_onnx(path, keep=0)  # any non-empty payload goes
    assert stripped == {"w", "s"}
    with pytest.raises(ValueError, match="keep_bytes"):
        read_structure(path, keep_bytes=-1)


def test_symlink_location_names_the_real_file(tmp_path: Path) -> None:
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    onnx.save(_model([h.make_node("Identity", ["w"], ["o"])], [], [_f32("o", [BIG])],
                     [nh.from_array(_rand(BIG), "w")]), real_dir / "m.onnx")
    (tmp_path / "link.onnx").symlink_to(real_dir / "m.onnx")
    t = load_structure(tmp_path / "link.onnx").graph.initializer[0]
    assert [e.value for e in t.external_data if e.key == "location"] == ["m.onnx"]
    np.testing.assert_array_equal(read_external_payload(t, str(real_dir)), _rand(BIG))


# ---------------------------------------------------------------------------------------------------------
# not a model


def _small_model_bytes() -> bytes:
    return _model([h.make_node("Relu", ["x"], ["y"])], [_f32("x", [BIG])], [_f32("y", [BIG])],
                  [nh.from_array(_rand(BIG), "unused")]).SerializeToString()


def _scan_error(path: Path) -> str:
    with pytest.raises(ScanError) as info:
        load_structure(path)
    message = str(info.value)
    assert message and "\n" not in message
    return message


def test_empty_file(tmp_path: Path) -> None:
    (tmp_path / "e.onnx").write_bytes(b"")
    assert _scan_error(tmp_path / "e.onnx") == "empty file"


def test_truncated_file(tmp_path: Path) -> None:
    data = _small_model_bytes()
    for cut in (len(data) // 2, len(data) - 1, 3):
        (tmp_path / "t.onnx").write_bytes(data[:cut])
        assert _scan_error(tmp_path / "t.onnx").startswith("truncated: "), cut
    # ir_version takes bytes 0-1, then the graph's tag (1 byte) and length; its body starts after them.
    graph_len = len(onnx.load_from_string(data).graph.SerializeToString())
    body = 2 + 1 + len(_varint(graph_len))
    (tmp_path / "t.onnx").write_bytes(data[: len(data) // 2])
    assert _scan_error(tmp_path / "t.onnx") == (
        f"truncated: field 7 claims {graph_len} bytes at offset {body} but the file ends at {len(data) // 2}"
    )


def test_random_bytes_text_and_png(tmp_path: Path) -> None:
    rng = np.random.default_rng(42)
    samples = [rng.bytes(n) for n in (1, 7, 100, 4096, 65536 + 13) for _ in range(8)]
    samples += [b"\x08" + rng.bytes(500) for _ in range(20)]  # starts like a model
    samples += [
        b"# graphcost\n\nStatic cost analysis of ONNX models.\n" * 20,
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10\x00\x00\x00\x10\x08\x06\x00\x00\x00" + rng.bytes(300),
        b'{"ir_version": 8, "graph": {}}',
        _ld(1, b"x") + _ld(7, b""),  # ir_version as a string
        _varint(1 << 3) + b"\x08" + _varint(7 << 3 | 3) + b"\x00",  # a group
    ]
    for i, data in enumerate(samples):
        path = tmp_path / f"r{i}.bin"
        path.write_bytes(data)
        message = _scan_error(path)
        assert message.startswith(("not an ONNX model: ", "truncated: ")), message
    assert "invalid wire type 7 at byte 0" in _scan_error(_write(tmp_path / "w.bin", b"\x0f\x00"))
    assert "group" in _scan_error(_write(tmp_path / "g.bin", samples[-1]))
    assert "ir_version" in _scan_error(_write(tmp_path / "v.bin", samples[-2]))


def test_corrupted_models_raise_only_scan_error(tmp_path: Path) -> None:
    """Flipped bytes and cuts anywhere: the scanner either returns a parseable model or says why not."""
    then_g = h.make_graph([h.make_node("Identity", ["T"], ["t"])], "then", [], [_f32("t", [BIG])],
                          [nh.from_array(_rand(BIG), "T")])
    data = _model([h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=then_g)],
                  [h.make_tensor_value_info("c", TensorProto.BOOL, [])], [_f32("y", [BIG])],
                  [h.make_tensor("i", TensorProto.INT64, [BIG], np.arange(BIG))]).SerializeToString()
    rng = np.random.default_rng(7)
    path = tmp_path / "c.onnx"
    for _ in range(300):
        damaged = bytearray(data)
        for k in rng.integers(0, len(data), size=int(rng.integers(1, 4))):
            damaged[k] = int(rng.integers(0, 256))
        path.write_bytes(damaged[: int(rng.integers(1, len(data) + 1))] if rng.random() < 0.3 else damaged)
        try:
            load_structure(path, keep_bytes=int(rng.choice([0, 100, 1024])))
        except ScanError as e:
            assert "\n" not in str(e)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# ---------------------------------------------------------------------------------------------------------
# memory


def _write_big_model(path: Path, payload: int) -> int:
    """A model with one raw float initializer of ``payload`` bytes of zeros, streamed: never in memory here.

    Returns the payload's file offset. Protobuf merges repeated appearances of a message field, so the graph
    is its small serialized part followed by the initializer record written by hand.
    """
    model = _model([h.make_node("Identity", ["w"], ["o"])], [], [_f32("o", [payload // 4])])
    head = TensorProto(name="w", dims=[payload // 4], data_type=TensorProto.FLOAT).SerializeToString()
    tensor_len = len(head) + 1 + len(_varint(payload)) + payload  # + raw_data tag, length, bytes
    graph_small = model.graph.SerializeToString()
    init_hdr = _varint(5 << 3 | 2) + _varint(tensor_len)
    model.ClearField("graph")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
        f.write(_varint(7 << 3 | 2) + _varint(len(graph_small) + len(init_hdr) + tensor_len))
        f.write(graph_small + init_hdr + head + _varint(9 << 3 | 2) + _varint(payload))
        offset = f.tell()
        chunk = bytes(8 << 20)
        for _ in range(payload // len(chunk)):
            f.write(chunk)
        f.write(bytes(payload % len(chunk)))
    return offset


def _peak_rss_kib(code: str) -> int:
    out = subprocess.run([sys.executable, "-c", code + "\nimport resource\n"
                          "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


def test_peak_memory_is_independent_of_payload(tmp_path: Path) -> None:
    payload = 200 << 20
    path = tmp_path / "big.onnx"
    offset = _write_big_model(path, payload)
    t = load_structure(path).graph.initializer[0]
    assert {e.key: e.value for e in t.external_data} == {"location": "big.onnx", "offset": str(offset),
                                                          "length": str(payload)}
    # Load the module by path: the measurement should not depend on what graphcost/__init__ imports.
    setup = ("import importlib.util, sys, onnx\n"
             f"spec = importlib.util.spec_from_file_location('_scan', {str(REPO / 'graphcost' / '_scan.py')!r})\n"
             "scan = importlib.util.module_from_spec(spec); spec.loader.exec_module(scan)\n"
             "load_structure = scan.load_structure\n")
    baseline = _peak_rss_kib(setup)
    loaded = _peak_rss_kib(setup + f"m = load_structure({str(path)!r})\nassert len(m.graph.initializer) == 1")
    assert loaded - baseline < 30 * 1024, (baseline, loaded)  # KiB; the payload alone is 200 MiB


def test_public_surface() -> None:
    assert sorted(_scan.__all__) == sorted(
        ["ENCODING_KEY", "FIELDS_ENCODING", "ScanError", "load_structure", "read_external_payload", "read_structure"]
    )
    assert issubclass(ScanError, ValueError)
