"""`graphcost hardware detect` and `graphcost hardware measure`: parsers on captured text, catalog matching, the
estimate in closed form, and a quick measurement whose spec round-trips through TOML into `analyze`.

Speeds are never asserted: only relations that hold by construction (a level is never slower than a bigger one,
the float32 peak is the best float32 sample, ...).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from graphcost.cli import main
from graphcost.hardware import HardwareSpec, catalog
from graphcost.hardware import detect as det
from graphcost.hardware import measure as meas
from graphcost.hardware.detect import CacheLevel, CpuInfo

ROOT = Path(__file__).resolve().parent.parent
TINY_CNN = ROOT / "models" / "tiny_cnn.onnx"
KIB, MIB = 2**10, 2**20


# ---------------------------------------------------------------------------------------------------------------
# detect() on this machine


def test_detect_this_machine() -> None:
    found = det.detect()
    assert found.kind in {"cpu", "gpu", "apple"}
    assert found.cpu.usable_cpus >= 1 and found.cpu.physical_cores >= 1
    assert isinstance(found.spec, HardwareSpec) and found.spec.peak_flops["float32"] > 0
    assert found.how
    assert (found.matched is None) == found.spec.name.startswith("estimate-")
    json.dumps(found.to_dict())  # JSON-ready
    if Path("/sys/devices/system/cpu/cpu0/cache").is_dir():
        names = [c.name for c in found.cpu.caches]
        assert "L1d" in names and all(c.size_bytes > 0 and c.instances >= 1 for c in found.cpu.caches)


@pytest.mark.skipif(not Path("/sys/devices/system/cpu/cpu0/cache").is_dir(), reason="no /sys cache tree (not Linux)")
def test_sys_caches_agree_with_lscpu() -> None:
    # lscpu prints each level's total over all instances ("L1d cache: 64 KiB (2 instances)"); /sys gives one
    # instance and who shares it. With every CPU usable the two must agree.
    text = det.run_tool(["lscpu"])
    found = det.detect()
    if text is None or found.cpu.usable_cpus != found.cpu.logical_cpus:
        pytest.skip("lscpu missing, or affinity hides some CPUs")
    totals = det._lscpu_caches(det.parse_lscpu(text))
    assert {c.name: c.total_bytes for c in totals} == {c.name: c.total_bytes for c in found.cpu.caches}


def test_read_sys_caches_counts_instances(tmp_path: Path) -> None:
    # Two CPUs, private L1d/L2, one shared L3: the layout of the machine this was written on.
    layout = [("0", 1, "Data", "32K"), ("1", 1, "Instruction", "32K"), ("2", 2, "Unified", "512K"),
              ("3", 3, "Unified", "32768K")]  # fmt: skip
    for cpu in (0, 1):
        for index, level, kind, size in layout:
            d = tmp_path / f"cpu{cpu}" / "cache" / f"index{index}"
            d.mkdir(parents=True)
            shared = "0-1" if level == 3 else str(cpu)
            for name, value in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
                (d / name).write_text(f"{value}\n")
    caches = det.read_sys_caches(tmp_path, [0, 1])
    assert caches == (
        CacheLevel("L1d", 1, 32 * KIB, 2, 1),  # instruction cache skipped
        CacheLevel("L2", 2, 512 * KIB, 2, 1),
        CacheLevel("L3", 3, 32 * MIB, 1, 2),
    )
    assert [c.total_bytes for c in caches] == [64 * KIB, 1 * MIB, 32 * MIB]  # lscpu's totals
    assert det.read_sys_caches(tmp_path, [0])[0].instances == 1  # only CPU 0 usable: one L1d


@pytest.mark.parametrize(("text", "size"), [
    ("32K", 32 * KIB), ("64 KiB", 64 * KIB), ("1 MiB", MIB), ("32768K", 32 * MIB), ("143771 MiB", 143771 * MIB),
    ("32 GB", 32 * 2**30), ("512", 512), ("n/a", None),
])  # fmt: skip
def test_parse_size(text: str, size: int | None) -> None:
    assert det.parse_size(text) == size


# ---------------------------------------------------------------------------------------------------------------
# GPUs, Apple chips and CPUs from captured text


def test_nvidia_smi_lines_match_the_catalog() -> None:
    text = "NVIDIA H200, 143771 MiB, 1980 MHz\nNVIDIA A100-SXM4-40GB, 40960 MiB, 1410 MHz\nTesla T4, 15360 MiB, [N/A]\n"
    gpus = det.parse_nvidia_smi(text)
    assert gpus[0] == det.GpuInfo("NVIDIA H200", 143771 * MIB, 1980e6, "nvidia-smi")
    assert gpus[2].max_sm_clock_hz is None
    assert [det.match_catalog(g.name).spec for g in gpus] == [catalog.get(n) for n in ("h200", "a100", "t4")]


def test_detect_with_an_nvidia_gpu() -> None:
    def run(argv: Sequence[str]) -> str | None:
        return "NVIDIA H200, 143771 MiB, 1980 MHz\n" if argv[0] == "nvidia-smi" else det.run_tool(argv)

    found = det.detect(run=run)
    assert found.kind == "gpu" and found.matched is found.spec == catalog.get("h200-sxm")
    assert found.how == "nvidia-smi name 'NVIDIA H200' matched catalog 'h200-sxm' by alias 'h200'"


def test_detect_with_an_unknown_gpu_estimates_the_host() -> None:
    def run(argv: Sequence[str]) -> str | None:
        return "NVIDIA H100 NVL, 95830 MiB, 1785 MHz\n" if argv[0] == "nvidia-smi" else det.run_tool(argv)

    found = det.detect(run=run)
    assert found.kind == "gpu" and found.matched is None
    assert found.spec.name.startswith("estimate-") and "host CPU" in found.how


SYSTEM_PROFILER = """Hardware:

    Hardware Overview:

      Model Name: MacBook Pro
      Model Identifier: Mac14,9
      Chip: Apple M2 Pro
      Total Number of Cores: 12 (8 performance and 4 efficiency)
      Memory: 32 GB
"""


def test_system_profiler() -> None:
    apple = det.parse_system_profiler(SYSTEM_PROFILER)
    assert apple == det.AppleInfo("Apple M2 Pro", 12, 8, 4, 32 * 2**30)
    assert det.match_catalog(apple.chip).spec == catalog.get("m2-pro")
    assert det.parse_system_profiler("Hardware:\n  Model Name: iMac\n") is None


XEON = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+
cpu MHz\t\t: 2000.000
siblings\t: 112
cpu cores\t: 56
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw avx512_vnni avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8

processor\t: 1
vendor_id\t: GenuineIntel
"""

RPI5 = """processor\t: 0
BogoMIPS\t: 108.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
CPU part\t: 0xd0b

processor\t: 1
BogoMIPS\t: 108.00

Revision\t: d04170
Model\t\t: Raspberry Pi 5 Model B Rev 1.0
"""

THIS_VM = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
cpu MHz\t\t: 2445.406
flags\t\t: fpu sse2 avx fma avx2 f16c
"""


def test_cpuinfo_xeon() -> None:
    info = det.parse_cpuinfo(XEON)
    assert info["model name"] == "Intel(R) Xeon(R) Platinum 8480+" and info["processors"] == "2"
    assert det.match_catalog(info["model name"]).spec == catalog.get("xeon-8480plus")
    flags = info["flags"].split()
    simd = det.simd_from_flags(flags, info["vendor_id"], 6, 143)
    assert (simd.isa, simd.width_bits, simd.fma, simd.fma_pipes) == ("avx512f", 512, True, 1)  # pipes not assumed
    assert simd.fp32_flops_per_cycle() == 512 // 32 * 1 * 2  # 16 lanes × 1 pipe × 2 FLOP per FMA
    assert det.low_precision_arithmetic(flags) == {"float16": "avx512_fp16", "bfloat16": "amx_bf16"}


def test_cpuinfo_raspberry_pi_board() -> None:
    info = det.parse_cpuinfo(RPI5)
    assert info["Model"] == "Raspberry Pi 5 Model B Rev 1.0"
    assert det.match_catalog(info["Model"]).spec == catalog.get("raspberry-pi-5")
    simd = det.simd_from_flags(info["Features"].split())
    assert (simd.isa, simd.width_bits, simd.fma) == ("neon", 128, True)
    assert det.low_precision_arithmetic(info["Features"].split()) == {"float16": "asimdhp", "bfloat16": None}


def test_cpuinfo_amd_vm_matches_nothing() -> None:
    info = det.parse_cpuinfo(THIS_VM)
    assert det.match_catalog(info["model name"]).spec is None  # "EPYC" alone is not a model
    simd = det.simd_from_flags(info["flags"].split(), "AuthenticAMD", 25, 1)
    assert (simd.effective_bits, simd.fma_pipes) == (256, 2)  # Zen 3: two 256-bit FMA pipes, known
    assert det.low_precision_arithmetic(info["flags"].split()) == {"float16": None, "bfloat16": None}  # f16c converts


@pytest.mark.parametrize(("text", "name"), [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
    ("NVIDIA A100 80GB", "a100-sxm-80gb"),  # its alias "a100-80gb"; the 40 GB "a100" would contradict the size
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("NVIDIA L4", "l4"),
    ("AMD EPYC 9654 96-Core Processor", "epyc-9654"),
    ("Intel(R) Core(TM) Ultra 7 155H", "core-ultra-7-155h"),
    ("AMD Ryzen 7 7840U w/ Radeon 780M Graphics", "ryzen-7-7840u"),
    ("NVIDIA Jetson AGX Orin Developer Kit", "jetson-agx-orin"),
    ("Apple M3 Max", "apple-m3-max"),
])  # fmt: skip
def test_model_identifiers_match(text: str, name: str) -> None:
    match = det.match_catalog(text)
    assert match.spec is not None and match.spec.name == name, match.reason


@pytest.mark.parametrize("text", [
    "AMD EPYC",  # no model number
    "Genoa",  # a code name, not a model
    "NVIDIA H100 NVL",  # another product than the SXM "h100"
    "NVIDIA A100 80GB PCIe",  # no PCIe A100 in the catalog
    "NVIDIA H100 94GB HBM3",  # "h100" is the 80 GB part: the size contradicts it
    "AMD EPYC 9654P 96-Core Processor",  # another SKU
    "Intel(R) Xeon(R) Platinum 8480C",
    "Apple M2 Ultra",
    "NVIDIA GeForce RTX 4090 D",
])  # fmt: skip
def test_loose_or_other_models_do_not_match(text: str) -> None:
    match = det.match_catalog(text)
    assert match.spec is None and match.reason


# ---------------------------------------------------------------------------------------------------------------
# The estimate, in closed form


def _cpu(vendor: str, family: int | None, flags: tuple[str, ...], usable: int, per_core: int) -> CpuInfo:
    return CpuInfo(
        model="Test CPU 1234", vendor=vendor, family=family, model_number=1, logical_cpus=usable, usable_cpus=usable,
        threads_per_core=per_core, sockets=1, clock_hz=3.0e9, clock_source="test", flags=flags,
        simd=det.simd_from_flags(flags, vendor, family, 1), caches=(CacheLevel("L3", 3, 16 * MIB, 1, usable),),
        memory_bytes=None, board=None,
    )  # fmt: skip


def test_estimate_formula() -> None:
    intel = det.estimate_cpu(_cpu("GenuineIntel", 6, ("avx", "avx2", "fma"), usable=16, per_core=2))
    # 16 logical CPUs / 2 SMT threads = 8 cores × 3.0e9 Hz × 8 FP32 lanes (256 bit) × 1 FMA pipe × 2 FLOP per FMA
    assert intel.peak_flops["float32"] == 8 * 3.0e9 * 8 * 1 * 2
    assert intel.peak_flops["float64"] == intel.peak_flops["float32"] / 2  # half the lanes
    assert intel.memory_bandwidth == det.DEFAULT_DRAM_BANDWIDTH == 2400e6 * 8  # one DDR4-2400 channel
    assert intel.onchip_bytes == 16 * MIB and intel.kind == "cpu"
    assert any("8 cores × 3e+09 Hz × 8 FP32 lanes × 1 FMA pipes × 2" in s for s in intel.sources)
    zen = det.estimate_cpu(_cpu("AuthenticAMD", 0x19, ("avx", "avx2", "fma"), usable=8, per_core=1))
    assert zen.peak_flops["float32"] == 8 * 3.0e9 * 8 * 2 * 2  # Zen 3: 2 FMA pipes known
    plain = det.estimate_cpu(_cpu("GenuineIntel", 6, ("sse2",), usable=4, per_core=1))
    assert plain.peak_flops["float32"] == 4 * 3.0e9 * 4 * 1 * 1  # 4 lanes, no FMA: one FLOP per lane


# ---------------------------------------------------------------------------------------------------------------
# measure(): the level rule on synthetic samples, then a quick real run


def _sample(size: int, gbps: float) -> meas.BandwidthSample:
    return meas.BandwidthSample("copy", "numpy", size, size, 1, 1, size / (gbps * 1e9))


def test_levels_are_best_in_band_and_never_slower_than_a_bigger_level() -> None:
    capacities = [("L1d", 64 * KIB), ("L2", MIB), ("L3", 32 * MIB)]
    samples = [_sample(16 * KIB, 50), _sample(256 * KIB, 40), _sample(4 * MIB, 60), _sample(16 * MIB, 55),
               _sample(64 * MIB, 12), _sample(256 * MIB, 10)]  # fmt: skip
    levels = meas._levels(samples, capacities)
    assert [lv.name for lv in levels] == ["L1d", "L2", "L3", "DRAM"]
    # DRAM: best beyond 32 MiB (64 MiB's 12, not 256 MiB's 10); L3: best in (1, 32] MiB = 60; L2 measured 40 but
    # raised to L3's 60; L1d measured 50, raised too.
    assert [round(lv.bandwidth / 1e9, 6) for lv in levels] == [60, 60, 60, 12]
    assert levels[1].decided_by.startswith("raised to L3")


def test_capacities_over_threads_and_victim_levels() -> None:
    found = det.detect()
    caches = (CacheLevel("L1d", 1, 48 * KIB, 56, 1), CacheLevel("L2", 2, 2 * MIB, 56, 1),
              CacheLevel("L3", 3, 105 * MIB, 1, 56))  # fmt: skip
    spr = replace(found, cpu=replace(found.cpu, caches=caches))
    # 56 threads: 56 private L1d and L2 instances; the 112 MiB of L2 exceed the 105 MiB L3, so L3 counts both.
    assert meas._capacities(spr, 56) == [("L1d", 56 * 48 * KIB), ("L2", 112 * MIB), ("L3", 112 * MIB + 105 * MIB)]
    assert meas._capacities(spr, 2) == [("L1d", 96 * KIB), ("L2", 4 * MIB), ("L3", 105 * MIB)]


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"threads": 0}, "threads must be ≥ 1"),
    ({"dtypes": ("float64",)}, "must include float32"),
    ({"dtypes": ("float32", "int8")}, "cannot measure dtype 'int8'"),
])  # fmt: skip
def test_measure_refuses_bad_arguments(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        meas.measure(quick=True, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def quick() -> meas.Measured:
    return meas.measure(quick=True)


def test_quick_measure_is_a_valid_spec_that_round_trips(quick: meas.Measured, tmp_path: Path) -> None:
    spec = quick.spec
    assert spec.kind == "measured" and quick.threads == quick.detection.cpu.usable_cpus
    assert all(s.bytes_per_s > 0 for s in quick.bandwidth) and all(s.flops_per_s > 0 for s in quick.compute)
    # By construction: each peak is its dtype's best sample; DRAM is the last level; levels grow in capacity and
    # never get slower than a bigger one (nor than DRAM).
    for dtype, peak in spec.peak_flops.items():
        assert peak == max(s.flops_per_s for s in quick.compute if s.dtype == dtype)
    assert set(spec.peak_flops) == {"float32", "float64"}
    assert spec.memory_bandwidth == quick.levels[-1].bandwidth
    bandwidths = [bw for _, bw in spec.cache_levels] + [spec.memory_bandwidth]
    assert bandwidths == sorted(bandwidths, reverse=True)
    if spec.cache_levels:
        assert (spec.onchip_bytes, spec.onchip_bandwidth) == spec.cache_levels[-1]
    kernels = {(s.kernel, s.runner) for s in quick.bandwidth}
    assert kernels == {(k, r) for k in ("copy", "read") for r in ("numpy", "onnxruntime")}
    assert all(any(f"bandwidth {k} {r}" in src for src in spec.sources) for k, r in kernels)
    # A copy pass moves what it reads plus what it writes: numpy's working set is twice its source chunks.
    assert all(s.working_set % 8 == 0 for s in quick.bandwidth if s.kernel == "copy")

    path = tmp_path / "measured.toml"
    path.write_text(catalog.to_toml(spec), encoding="utf-8")
    loaded = catalog.load_file(path)
    assert loaded.peak_flops == spec.peak_flops
    assert loaded.memory_bandwidth == spec.memory_bandwidth and loaded.cache_levels == spec.cache_levels
    assert loaded.kind == "measured" and loaded.sources == spec.sources


# ---------------------------------------------------------------------------------------------------------------
# The command line


def test_cli_detect_writes_a_spec_analyze_accepts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "detected.toml"
    assert main(["hardware", "detect", "--format", "json", "-o", str(out)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["spec"]["name"] == catalog.load_file(out).name
    assert main(["hardware", "detect"]) == 0
    text = capsys.readouterr().out
    assert "match:" in text and "peak compute" in text
    assert main(["analyze", str(TINY_CNN), "--hardware", str(out), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["hardware"]["name"] == data["spec"]["name"]


def test_cli_measure_output(quick: meas.Measured, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(meas, "measure", lambda **_: quick)  # the quick run above, not a second one
    out = tmp_path / "spec.toml"
    assert main(["hardware", "measure", "--quick", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "working set" in text and "GFLOP/s" in text and "ridge" in text and f"wrote {out}" in text
    assert catalog.load_file(out).cache_levels == quick.spec.cache_levels
    assert main(["analyze", str(TINY_CNN), "--hardware", str(out)]) == 0
    assert quick.spec.name in capsys.readouterr().out
    assert main(["hardware", "measure", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["spec"]["kind"] == "measured"


@pytest.mark.parametrize(("args", "needle"), [
    (["hardware", "measure", "--threads", "0"], "--threads 0: must be ≥ 1"),
    (["hardware", "detect", "-o", "/nonexistent-dir/x.toml"], "cannot write"),
])  # fmt: skip
def test_cli_bad_input_is_one_line(args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and err.startswith("graphcost: ")


@pytest.mark.heavy
def test_full_measure_round_trips_into_analyze(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "full.toml"
    assert main(["hardware", "measure", "-o", str(out)]) == 0
    spec = catalog.load_file(out)
    assert spec.kind == "measured" and spec.peak_flops["float32"] > 0 and spec.memory_bandwidth > 0
    if spec.cache_levels:  # the full sweep reaches past 4× the last cache (memory permitting)
        assert any("beyond the last cache level" in s for s in spec.sources)
    capsys.readouterr()
    assert main(["analyze", str(TINY_CNN), "--hardware", str(out), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["hardware"]["name"] == spec.name and report["totals"]["roofline_time_s"] > 0


def test_busy_machine_warning_uses_the_load_before_measuring() -> None:
    from graphcost.hardware.measure import busy_warning

    assert busy_warning(2, None) is None and busy_warning(2, 0.9) is None  # under half the threads busy
    warning = busy_warning(2, 1.5)
    assert warning is not None and warning.startswith("warning: the machine was busy") and "1.50" in warning
