"""The hardware catalog, spec files and command-line quantities."""

from __future__ import annotations

from pathlib import Path

import pytest

import graphcost.hardware as hw
from graphcost.hardware import HardwareError, HardwareSpec
from graphcost.hardware import catalog as cat
from graphcost.hardware.spec import _FALLBACK, DEFAULT_ENERGY_PER_BYTE

CATALOG = cat.list_specs()


def test_public_surface() -> None:
    assert sorted(hw.__all__) == sorted([
        "DEFAULT_HARDWARE", "HardwareError", "HardwareSpec", "adhoc", "get", "list_specs", "load_file",
        "override", "resolve",
    ])  # fmt: skip


def test_catalog_dtypes_are_the_ones_peak_for_reads() -> None:
    # A peak under any other key would never be looked up; the catalog's allowed keys must match the spec's table.
    read_by_peak_for = {dtype for chain in _FALLBACK.values() for dtype in chain}
    assert set(cat.DTYPES) == read_by_peak_for


def test_catalog_is_sorted_and_unique() -> None:
    names = [spec.name for spec in CATALOG]
    assert names == sorted(names)
    assert len(set(names)) == len(names)


def test_one_file_lookup_finds_what_the_whole_catalog_finds() -> None:
    # get() parses only the files whose text holds the key; every name and alias, in any spelling _key folds
    # (case, spaces, underscores), must give the very object the whole catalog's index holds for it.
    whole = cat._catalog()
    for spec in CATALOG:
        for name in (spec.name, *cat.aliases_of(spec.name)):
            for spelling in (name, name.upper(), name.replace("-", " "), name.replace("-", "_")):
                assert cat.get(spelling) is whole.index[cat._key(name)]


@pytest.mark.parametrize("spec", CATALOG, ids=lambda s: s.name)
def test_every_entry_is_complete_and_cited(spec: HardwareSpec) -> None:
    assert spec.sources, "every number needs a source"
    assert "float32" in spec.peak_flops
    assert all(peak > 0 for peak in spec.peak_flops.values())
    assert set(spec.peak_flops) <= set(cat.DTYPES)
    assert spec.memory_bandwidth > 0
    assert spec.kind in {"gpu", "cpu", "soc", "npu"}
    assert spec.description
    assert spec.energy_per_byte > 0
    if spec.onchip_bandwidth is not None:
        assert spec.onchip_bytes is not None
    # Dense peaks: no datasheet "with sparsity" doubling should sneak in as a < 1 FLOP/B or absurd ridge.
    assert 1 < spec.ridge_point("float32") < 200


def test_edge_soc_is_the_chapter_reference_device() -> None:
    spec = hw.get(hw.DEFAULT_HARDWARE)
    assert spec.name == "edge-soc"
    assert spec.peak_flops["float32"] == 2e12  # stated: 2 TFLOP/s fp32
    assert spec.memory_bandwidth == 50e9  # stated: 50 GB/s DRAM
    assert spec.ridge_point("float32") == 2e12 / 50e9 == 40  # the chapter's ridge point, exactly
    assert spec.onchip_bandwidth is None  # bounds on it are pure DRAM bounds


def test_mobile_npu_ridge_point() -> None:
    spec = hw.get("mobile-npu")
    assert spec.peak_flops["int8"] == 4e12  # stated: 4 TOPS int8
    assert spec.memory_bandwidth == 25e9  # stated: 25 GB/s
    assert spec.ridge_point("int8") == 4e12 / 25e9 == 160  # chapter problem 1


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("h200", "h200-sxm"),
        ("h100", "h100-sxm"),
        ("H100 SXM", "h100-sxm"),
        ("h100_pcie", "h100-pcie"),
        ("a100", "a100-sxm-40gb"),
        ("A100-80GB", "a100-sxm-80gb"),
        ("l4", "l4"),
        ("T4", "t4"),
        ("rtx-4090", "rtx-4090"),
        ("4090", "rtx-4090"),
        ("orin", "jetson-agx-orin"),
        ("jetson-agx-orin", "jetson-agx-orin"),
        *(
            (chip, f"apple-{chip}")
            for chip in ("m1", "m1-pro", "m1-max", "m2", "m2-pro", "m2-max", "m3", "m3-pro", "m3-max")
        ),
        ("Apple M3 Max", "apple-m3-max"),
        ("epyc-9654", "epyc-9654"),
        ("genoa", "epyc-9654"),
        ("xeon-platinum-8480+", "xeon-8480plus"),
        ("sapphire-rapids", "xeon-8480plus"),
        ("155h", "core-ultra-7-155h"),
        ("7840u", "ryzen-7-7840u"),
        ("rpi5", "raspberry-pi-5"),
        ("raspberry-pi-5", "raspberry-pi-5"),
        ("edge-soc", "edge-soc"),
        ("mobile-npu", "mobile-npu"),
    ],
)
def test_required_names_and_aliases_resolve(query: str, name: str) -> None:
    assert hw.get(query).name == name
    assert hw.resolve(query).name == name


def test_unknown_name_suggests_close_ones() -> None:
    with pytest.raises(HardwareError, match="h100") as info:
        hw.get("h10")
    assert "\n" not in str(info.value)


USER_FILE = """
[[device]]
name = "my-board"
kind = "soc"
description = "a board on my desk"
memory_bandwidth = "34GB/s"          # a string with a unit is read by parse_quantity
onchip_bytes = 4_194_304
onchip_bandwidth = 200e9
energy_per_byte = 120e-12
sustained_power_w = 10
sources = ["measured: stream copy"]

[device.peak_flops]
fp32 = 1.2e12                        # short dtype spellings are normalised
int8 = "4.8TOPS"
"""


def test_user_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "board.toml"
    path.write_text(USER_FILE)
    spec = hw.load_file(path)
    assert spec.name == "my-board"
    assert dict(spec.peak_flops) == {"float32": 1.2e12, "int8": 4.8e12}
    assert spec.memory_bandwidth == 34e9
    assert spec.onchip_bytes == 4 * 2**20
    assert spec.onchip_bandwidth == 200e9
    assert spec.energy_per_byte == 120e-12
    assert spec.sustained_power_w == 10
    assert spec.ridge_point("float32") == pytest.approx(1.2e12 / 34e9)
    assert hw.resolve(str(path)) == spec  # a path to an existing file wins over catalog names


def test_single_device_at_top_level(tmp_path: Path) -> None:
    path = tmp_path / "flat.toml"
    path.write_text('name = "flat"\nmemory_bandwidth = 1e9\npeak_flops = { float32 = 1e10 }\n')
    spec = hw.load_file(path)
    assert (spec.name, spec.ridge_point(), spec.energy_per_byte) == ("flat", 10.0, DEFAULT_ENERGY_PER_BYTE)


@pytest.mark.parametrize("spec", CATALOG, ids=lambda s: s.name)
def test_to_toml_round_trip(spec: HardwareSpec, tmp_path: Path) -> None:
    path = tmp_path / f"{spec.name}.toml"
    path.write_text(cat.to_toml(spec, cat.aliases_of(spec.name)), encoding="utf-8")
    assert hw.load_file(path) == spec


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("name = ", "invalid TOML"),
        ('name = "x"\npeak_flops = { float32 = 1e12 }\n', "'memory_bandwidth': required"),
        ('name = "x"\nmemory_bandwidth = 1e9\n', "'peak_flops': required"),
        ('name = "x"\nmemory_bandwidth = -1\npeak_flops = { float32 = 1e12 }\n', "'memory_bandwidth': must be"),
        ('name = "x"\nmemory_bandwidth = 1e9\npeak_flops = { float32 = 0 }\n', "'peak_flops.float32': must be"),
        ('name = "x"\nmemory_bandwidth = 1e9\npeak_flops = { fp17 = 1e12 }\n', "unknown dtype 'fp17'"),
        ('name = "x"\nmemory_bandwidth = "fast"\npeak_flops = { float32 = 1 }\n', "'memory_bandwidth': not a quantity"),
        ('name = "x"\nbandwith = 1e9\n', "unknown field 'bandwith' (did you mean"),
        ('name = "x"\nkind = "fpga"\n', "'kind'"),
        (
            'name = "x"\nmemory_bandwidth = 1e9\nonchip_bandwidth = 1e12\npeak_flops = { float32 = 1 }\n',
            "needs onchip_bytes",
        ),
        ("memory_bandwidth = 1e9\n", "'name': required"),
        ('[[device]]\nname = "a"\n[[device]]\nname = "b"\n', "exactly one device, found 2"),
    ],
)
def test_bad_file_names_file_and_field(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(HardwareError) as info:
        hw.load_file(path)
    message = str(info.value)
    assert str(path) in message
    assert needle in message
    assert "\n" not in message


def test_missing_file() -> None:
    with pytest.raises(HardwareError, match="no such hardware file"):
        hw.resolve("does/not/exist.toml")
    with pytest.raises(HardwareError, match="cannot read"):
        hw.load_file("does/not/exist.toml")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2e12", 2e12),
        ("2T", 2e12),
        ("2TFLOPS", 2e12),
        ("2 TFLOP/s", 2e12),
        ("989.4 TFLOPS", 989.4e12),
        ("4TOPS", 4e12),
        ("50GB/s", 50e9),
        ("50G", 50e9),
        ("3.35 TB/s", 3.35e12),
        ("160pJ", 160e-12),
        ("160 pJ/B", 160e-12),
        ("1.5e-10", 1.5e-10),
        ("40MiB", 40 * 2**20),
        ("2PFLOPS", 2e15),
        ("1.2k", 1.2e3),
        ("5mW", 5e-3),
        ("7", 7.0),
    ],
)
def test_parse_quantity(text: str, value: float) -> None:
    assert cat.parse_quantity(text) == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize("text", ["", "fast", "2X", "2 TB/h", "-3", "1e999", "50Gb/s"])
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(HardwareError):
        cat.parse_quantity(text)


def test_parse_peak_flops() -> None:
    assert cat.parse_peak_flops("2T") == ("float32", 2e12)  # no dtype: float32
    assert cat.parse_peak_flops("int8=8TOPS") == ("int8", 8e12)
    assert cat.parse_peak_flops("bf16=1e15") == ("bfloat16", 1e15)
    with pytest.raises(HardwareError, match="unknown dtype"):
        cat.parse_peak_flops("fp17=1T")
    with pytest.raises(HardwareError, match="> 0"):
        cat.parse_peak_flops("0")


def test_derated_gives_textbook_fractions() -> None:
    spec = hw.get("edge-soc")
    derated = spec.derated()
    for dtype, peak in spec.peak_flops.items():
        assert derated.peak_flops[dtype] == pytest.approx(0.6 * peak)  # 0.6 of peak compute
    assert derated.memory_bandwidth == pytest.approx(0.7 * 50e9)  # 0.7 of peak bandwidth
    assert derated.derating == (0.6, 0.7)


def test_adhoc() -> None:
    spec = hw.adhoc({"float32": 2e12, "fp16": 4e12}, 50e9)
    assert spec.name == "custom"
    assert dict(spec.peak_flops) == {"float32": 2e12, "float16": 4e12}
    assert spec.ridge_point() == 40
    assert spec.energy_per_byte == DEFAULT_ENERGY_PER_BYTE
    with pytest.raises(HardwareError):
        hw.adhoc({"float32": 2e12}, 0)


def test_override_merges_and_renames() -> None:
    base = hw.get("edge-soc")
    spec = hw.override(base, peak_flops={"int8": 16e12}, memory_bandwidth=100e9, energy_per_byte=None)
    assert spec.name == "edge-soc+overrides"
    assert dict(spec.peak_flops) == {"float32": 2e12, "float16": 4e12, "int8": 16e12}
    assert spec.memory_bandwidth == 100e9
    assert spec.energy_per_byte == base.energy_per_byte
    assert any("memory_bandwidth" in source for source in spec.sources)
    assert hw.override(spec, energy_per_byte=1e-10).name == "edge-soc+overrides"  # suffixed once
    assert hw.override(base, peak_flops=None, memory_bandwidth=None, energy_per_byte=None) is base


def test_describe_shows_roofs_and_sources() -> None:
    text = cat.describe(hw.get("edge-soc"))
    assert text.splitlines()[0] == "edge-soc (soc)"
    assert "40 FLOP/B" in text  # float32 ridge
    assert "50 GB/s" in text
    assert "160 pJ" in text
    assert "Rooflines, Budgets" in text
    assert "not given" in text  # no on-chip figures
    assert "7219 GB/s" in cat.describe(hw.get("a100"))  # 5120 B/clk × 1.41 GHz


def test_to_toml_keeps_awkward_floats_exact(tmp_path: Path) -> None:
    spec = hw.adhoc({"float32": 1e12 / 3, "int8": 2.0**50}, 7.77e9 + 0.1, energy_per_byte=1.234567e-11)
    path = tmp_path / "awkward.toml"
    path.write_text(cat.to_toml(spec), encoding="utf-8")
    assert hw.load_file(path) == spec


def test_docs_table_lists_every_device() -> None:
    docs = (Path(__file__).parents[1] / "docs" / "hardware.md").read_text(encoding="utf-8")
    missing = [spec.name for spec in CATALOG if f"| `{spec.name}` |" not in docs]
    assert not missing, f"add these devices to the table in docs/hardware.md: {missing}"
