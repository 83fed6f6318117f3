"""The planner through the C ABI: JSON numbers checked against arithmetic done by hand."""

import json
import math

import pytest

import mla

CONTEXT = 32768


def fmt_row(plan, name):
    rows = {f["name"]: f for f in plan["formats"]}
    assert name in rows, sorted(rows)
    return rows[name]


def test_deepseek_v3_kv_bytes_and_capacity_by_hand():
    p = mla.make_plan(model="deepseek-v3", gpu="h200", context=CONTEXT)
    # MLA entry: 512 latent + 64 rope values; bf16 = 1152 B, fp8_ds_mla = 656 B; 61 layers.
    bf16, fp8 = fmt_row(p, "mla-bf16"), fmt_row(p, "mla-fp8")
    assert bf16["cache_bytes_per_token_layer"] == 1152
    assert bf16["kv_bytes_per_token"] == 61 * 1152 == 70272
    assert fp8["kv_bytes_per_token"] == 61 * 656 == 40016
    assert bf16["kv_bytes_per_request"] == 70272 * CONTEXT
    # MHA contrast: 128 heads x (192 + 128) bf16 values per layer.
    assert fmt_row(p, "mha-bf16")["kv_bytes_per_token"] == 61 * 128 * (192 + 128) * 2
    # HBM: 141 GB x 0.9 usable; 671e9 fp8 weights over 8 GPUs.
    cap = p["capacity"]
    assert cap["usable_hbm_bytes"] == pytest.approx(141e9 * 0.9)
    assert cap["weights_bytes_per_gpu"] == pytest.approx(671e9 / 8)
    free = 141e9 * 0.9 - 671e9 / 8
    assert cap["free_bytes"] == pytest.approx(free)
    assert bf16["max_batch"] == math.floor(free / (70272 * CONTEXT)) == 18
    assert fp8["max_batch"] == math.floor(free / (40016 * CONTEXT)) == 32
    # batch 0 = auto: the largest bf16 batch.
    assert p["workload"]["batch"] == 18 and p["workload"]["batch_auto"]


def test_decode_step_flops_bytes_and_roofline_by_hand():
    B, L = 16, 4096
    p = mla.make_plan(model="deepseek-v3", gpu="h200", batch=B, context=L)
    step = fmt_row(p, "mla-bf16")["step"]
    flops = 2 * 128 * L * (576 + 512) * B * 61  # absorbed: 2*h*keys*(576+512) per layer
    nbytes = B * L * 70272  # every cached entry read once
    assert step["flops"] == flops
    assert step["bytes"] == nbytes
    assert step["intensity"] == pytest.approx(flops / nbytes)  # 241.8 FLOP/B
    # docs/benchmarks.md's measured H200 ceilings: bf16 792 TFLOP/s, read 4391 GB/s; 242 > ridge 180.
    assert p["ceilings"]["bf16_flops"] == 792e12 and p["ceilings"]["read_bw"] == 4391e9
    assert step["floor_s"] == pytest.approx(max(flops / 792e12, nbytes / 4391e9))
    assert step["binds"] == "compute"


def test_v32_has_indexer_bytes():
    p = mla.make_plan(model="deepseek-v3.2", gpu="h200", batch=1)
    row = fmt_row(p, "mla-bf16+dsa")
    assert row["indexer_bytes_per_token_layer"] == 132  # 128 e4m3 + one fp32 scale
    assert row["kv_bytes_per_token"] == 61 * (1152 + 132)


def test_text_and_json_agree_and_defaults():
    d = mla.default_workload()
    assert d["model"] == "deepseek-v3.2" and d["gpu"] == "h200" and d["batch"] == 0
    assert d["phase"] == "decode" and d["kv"] == "bf16" and d["mem_util"] == 0.9
    text = mla.plan_text(model="deepseek-v3", gpu="h200")
    assert "DeepSeek-V3" in text and "70,272" in text
    assert json.loads(mla.plan_json(model="deepseek-v3"))["model"]["layers"] == 61


def test_seed_check_and_catalog():
    rows = mla.seed_check()
    assert rows and {"seed", "where", "claim", "ours", "verdict", "reason"} <= set(rows[0])
    assert {r["verdict"] for r in rows} <= {"right", "plausible", "approx", "wrong", "impossible"}
    assert mla.seed_check_text().count("\n") >= len(rows)
    gpus = {g["name"]: g for g in mla.known_gpus()}
    assert gpus["h200"]["hbm_bytes"] == 141e9 and gpus["h200"]["measured"]["copy_bw"] == 4284e9
    models = {m["name"]: m for m in mla.known_models()}
    assert models["deepseek-v3"]["layers"] == 61 and models["deepseek-v3"]["d_c"] == 512


def test_calibration_changes_the_prediction(tmp_path):
    cal = {"gpu": "h200", "source": "test",
           "entries": [{"kernel": "decode", "format": "bf16", "h_q": 128,
                        "fraction_of_ceiling": 0.5}]}
    plain = fmt_row(mla.make_plan(model="deepseek-v3", batch=8), "mla-bf16")["step"]
    for given in (cal, json.dumps(cal)):
        p = mla.make_plan(model="deepseek-v3", batch=8, calibration=given)
        assert p["calibrated"]
        assert fmt_row(p, "mla-bf16")["step"]["predicted_s"] == pytest.approx(
            plain["floor_s"] / 0.5)
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(cal))
    assert mla.make_plan(model="deepseek-v3", batch=8, calibration=str(path))["calibrated"]


def test_bad_workloads_name_the_value():
    with pytest.raises(mla.InvalidValueError, match="a100"):
        mla.make_plan(gpu="a100")
    with pytest.raises(mla.InvalidValueError, match="tp = 3"):
        mla.make_plan(model="deepseek-v3", tp=3)
    with pytest.raises(mla.InvalidValueError, match="fp16"):
        mla.make_plan(kv="fp16")
    with pytest.raises(mla.InvalidValueError, match="unknown workload field"):
        mla.make_plan(heads=4)
    with pytest.raises(mla.MlaError, match="fraction_of_ceiling"):
        mla.make_plan(calibration={"gpu": "h200", "entries": [
            {"kernel": "decode", "format": "bf16", "h_q": 128, "fraction_of_ceiling": 7}]})


def test_text_buffer_is_filled_snprintf_style():
    import ctypes

    from mla._lib import lib

    f = lib().fn("mla_plan_seed_check")
    full = mla.seed_check_json()
    n = ctypes.c_size_t(0)
    assert f(0, None, 0, ctypes.byref(n)) == 0 and n.value == len(full.encode())
    buf = ctypes.create_string_buffer(b"#" * 16)
    assert f(0, buf, 10, ctypes.byref(n)) == 0 and n.value == len(full.encode())
    assert buf.raw[:10] == full.encode()[:9] + b"\0" and buf.raw[10:] == b"#" * 6 + b"\0"
    assert f(0, None, 10, ctypes.byref(n)) == 7  # MLA_ERR_INVALID_VALUE: buf NULL, size 10
    assert "buf is NULL but buf_size = 10" in lib()._dll.mla_last_error_message().decode()
