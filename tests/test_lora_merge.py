"""A step's sampler merges its adapter directly (`backends/local/lora_merge.py`): the same weights, bit
for bit, as PEFT's merge_and_unload; an adapter of another kind is left to PEFT, the model untouched."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from peft import LoraConfig, PeftModel, get_peft_model
from test_local_backend import _nudge

from tinker_atropos.backends.local import LocalTrainingClient, create_sampler, load_base_model
from tinker_atropos.backends.local.engine import BaseModel
from tinker_atropos.backends.local.lora_merge import merge_plain_lora


@pytest.fixture(scope="module")
def base() -> BaseModel:
    return load_base_model("tiny-chat", "cpu")


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _peft_merged(base: BaseModel, adapter: Path) -> dict[str, torch.Tensor]:
    return _weights(PeftModel.from_pretrained(base.copy_model(), str(adapter)).merge_and_unload())


def _saved(base: BaseModel, config: LoraConfig, folder: Path) -> Path:
    """An adapter of `config` whose B matrices are not zero (as after training), saved by PEFT."""
    torch.manual_seed(7)
    model = get_peft_model(base.copy_model(), config)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(folder)
    return folder


def test_a_trained_adapter_merges_to_pefts_weights_bit_for_bit(base: BaseModel, tmp_path: Path) -> None:
    trainer = LocalTrainingClient(base, rank=8, run_dir=tmp_path, run_name="t", seed=0)
    _nudge(trainer)  # B off zero, as after training
    adapter = Path(trainer.save_weights_for_sampler("step-1"))
    expected = _peft_merged(base, adapter)
    untouched = _weights(base.model)

    merged = base.copy_model()
    assert merge_plain_lora(merged, adapter)
    got = _weights(merged)
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    assert any(not torch.equal(got[k], untouched[k]) for k in untouched)  # the adapter did change weights
    assert all(torch.equal(v, untouched[k]) for k, v in _weights(base.model).items())  # the base is not touched

    sampler = create_sampler(base, str(adapter))  # the sampler a step hands out: these weights
    assert all(torch.equal(v, expected[k]) for k, v in _weights(sampler.model).items())


@pytest.mark.parametrize(
    "config",
    [
        LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", use_rslora=True),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], rank_pattern={"v_proj": 2}),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], use_dora=True),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "embed_tokens"]),
    ],
    ids=["rslora", "rank-pattern", "dora", "embedding"],
)
def test_each_kind_of_adapter_samples_with_pefts_weights(base: BaseModel, config: LoraConfig, tmp_path: Path) -> None:
    adapter = _saved(base, config, tmp_path / "adapter")
    expected = _peft_merged(base, adapter)
    plain = config.use_rslora  # rsLoRA only scales differently: merged directly; the others by PEFT
    model = base.copy_model()
    before = _weights(model)
    assert merge_plain_lora(model, adapter) is plain
    if not plain:
        assert all(torch.equal(v, before[k]) for k, v in _weights(model).items())
    sampler = create_sampler(base, str(adapter))
    assert all(torch.equal(v, expected[k]) for k, v in _weights(sampler.model).items())


def test_a_config_field_it_does_not_know_takes_pefts_route(base: BaseModel, tmp_path: Path) -> None:
    adapter = _saved(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"), tmp_path / "adapter")
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, "some_future_variant": {"on": True}}))
    assert not merge_plain_lora(base.copy_model(), adapter)
