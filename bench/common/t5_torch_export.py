"""Export a random-init T5 v1.1 encoder with the TorchScript exporter, scaled like tests/models/hf_t5_export.py.

Where torch and transformers are installed (not in CI: use a venv of your own), this writes the real
export the regression builder reproduces, to compare the plans (issue 21, item 2):

    python -m bench.common.t5_torch_export out.onnx [layers=4] [growth=3000] [gate=12]
    trtpipe +recipe=transformer_fp16 model.path=out.onnx \\
        '++data.inputs.input_ids={low:0,high:512,dtype:int64,shape:[1,32]}' \\
        '++data.inputs.attention_mask={low:1,high:2,dtype:int64,shape:[1,32]}' \\
        'build.profiles=[{input_ids:{min:[1,1],opt:[1,32],max:[1,64]},attention_mask:{min:[1,1],opt:[1,32],max:[1,64]}}]'

Measured (transformers 5.24, torch 2.13): 104 -> 64 FP32 nodes, 78.7% -> 100% FLOPs FP16, rel_l2 0.0013 ->
0.0016, as on the builder's model. The scaling is `hf_t5_export.calibrated`'s, done with torch hooks.
"""

from __future__ import annotations

import sys

D_MODEL, MASSIVE, FOLLOWERS, SEQUENCE = 256, [17, 101], 160, 32


def main(argv: list[str]) -> None:
    import torch
    from transformers import T5Config, T5EncoderModel

    out = argv[0]
    layers, growth, gate = (int(argv[1]) if len(argv) > 1 else 4, float(argv[2]) if len(argv) > 2 else 3000.0,
                            float(argv[3]) if len(argv) > 3 else 12.0)
    torch.manual_seed(0)
    config = T5Config(vocab_size=512, d_model=D_MODEL, d_kv=32, d_ff=640, num_layers=layers, num_heads=8,
                      feed_forward_proj="gated-gelu", dropout_rate=0.0)
    model = T5EncoderModel(config).eval()
    ordinary = [c for c in range(D_MODEL) if c not in MASSIVE]
    ids = torch.randint(0, 512, (4, SEQUENCE))

    def seen_by(module, output=False):
        seen = {}
        hook = module.register_forward_hook(lambda m, i, o: seen.setdefault("x", (o if output else i[0]).detach()))
        model(input_ids=ids)
        hook.remove()
        return seen["x"]

    def set_gains(norm):  # massive channels damped, ordinary ones back to unit scale
        x = seen_by(norm)
        gains = torch.empty(D_MODEL).uniform_(0.9, 1.1) * x.pow(2).mean(-1).sqrt().mean() / x[..., ordinary].pow(
            2).mean().sqrt()
        gains[MASSIVE] = 0.02
        norm.weight.copy_(gains)

    with torch.no_grad():
        for block in model.encoder.block:
            set_gains(block.layer[0].layer_norm)
            set_gains(block.layer[1].layer_norm)
            ffn = block.layer[1].DenseReluDense
            ffn.wi_0.weight.mul_(gate)
            ffn.wi_1.weight[:FOLLOWERS] = ffn.wi_0.weight[:FOLLOWERS] / gate
            ffn.wo.weight[MASSIVE, :] = 0
            ffn.wo.weight[MASSIVE, :FOLLOWERS] = 1.0
            ffn.wo.weight[MASSIVE, :FOLLOWERS] *= growth / seen_by(ffn.wo, output=True)[..., MASSIVE].mean()
        set_gains(model.encoder.final_layer_norm)
        states = model(input_ids=ids, output_hidden_states=True).hidden_states
        print("max |residual stream| per block:", [round(float(h.abs().max())) for h in states])
    mask = torch.ones(1, SEQUENCE, dtype=torch.int64)
    torch.onnx.export(model, (ids[:1], mask), out, input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state"], opset_version=14, dynamo=False,
                      dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}})
    print("wrote", out)


if __name__ == "__main__":
    main(sys.argv[1:])
