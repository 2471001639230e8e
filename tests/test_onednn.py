"""oneDNN's linear layers: the same float32 product as torch's, chosen by timing."""

from __future__ import annotations

import pytest
import torch

from parley.models import onednn

# Only where torch was built with oneDNN (x86 and ARM builds are): elsewhere the server
# keeps torch's layers, which the last two tests still check.
needs_onednn = pytest.mark.skipif(not onednn.available(), reason="this torch has no oneDNN")


@needs_onednn
@pytest.mark.parametrize("rows", [1, 3, 8, 40])
@pytest.mark.parametrize("bias", [True, False])
def test_a_onednn_linear_computes_what_torch_does(rows, bias):
    torch.manual_seed(rows)
    linear = torch.nn.Linear(96, 160, bias=bias)
    x = torch.randn(2, rows, 96)  # any leading shape, as the decoder's (rows, width, d)
    with torch.inference_mode():
        expected = linear(x)
        got = onednn.OneDnnLinear(linear)(x)
    assert got.shape == expected.shape and got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


class _Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(64, 256), torch.nn.Linear(256, 64)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class _Decoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([_Layer() for _ in range(3)])


@needs_onednn
@pytest.mark.parametrize("faster", ["onednn", "torch"])
def test_the_decoder_keeps_the_faster_library_and_its_outputs(monkeypatch, faster):
    """Whichever times faster here is kept; either way the layers compute the same. Layers
    of the same shapes later take the same choice untimed (a main model and its copy as
    assistant must end alike)."""
    decoder = _Decoder()
    x = torch.randn(5, 64)
    with torch.inference_mode():
        before = [layer(x) for layer in decoder.layers]
    timed = iter([1.0, 2.0] if faster == "torch" else [2.0, 1.0])
    monkeypatch.setattr(onednn, "_seconds", lambda layers, rows: next(timed))
    monkeypatch.setattr(onednn, "_FASTER", {})
    assert onednn.faster_linears(decoder, 8) == (faster == "onednn")
    kinds = {type(m) for m in decoder.modules() if hasattr(m, "in_features")}
    assert kinds == ({onednn.OneDnnLinear} if faster == "onednn" else {torch.nn.Linear})
    again = _Decoder()  # timed again, next() would raise: the first timing decides
    assert onednn.faster_linears(again, 8) == (faster == "onednn")
    with torch.inference_mode():
        for layer, was in zip(decoder.layers, before):
            torch.testing.assert_close(layer(x), was, rtol=1e-5, atol=1e-5)


def test_only_float32_layers_on_the_cpu_are_timed():
    decoder = _Decoder().to(torch.bfloat16)
    assert onednn.faster_linears(decoder, 8) is False
    assert onednn.faster_linears(torch.nn.Linear(4, 4), 8) is False  # no layers


def test_the_loaded_engine_gives_a_clip_the_same_encoding_alone_and_batched(tiny_engine):
    """Whichever library the load chose (oneDNN where it timed faster), a clip's encoder
    output is its own, whatever it is batched with."""
    encoder = tiny_engine.model.model.encoder
    features = torch.randn(3, 80, 3000)
    with torch.inference_mode():
        together = encoder(features).last_hidden_state
        alone = encoder(features[1:2]).last_hidden_state
    assert torch.equal(together[1:2], alone)
    linears = {type(m) for m in tiny_engine.model.model.modules() if hasattr(m, "in_features")}
    assert linears <= {torch.nn.Linear, onednn.OneDnnLinear}
