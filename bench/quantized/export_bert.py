"""Child process (the bench extra's Python, which has torch and transformers): export a BERT encoder
with random weights to ONNX.

    python -m bench.quantized.export_bert OUT SEQUENCE VOCAB

2 layers, hidden 128, 2 heads, FFN 512, seed 0; inputs `input_ids` and `attention_mask` [1, SEQUENCE]
(int64), output `last_hidden_state`; `torch.onnx.export` (TorchScript exporter), opset 17.
"""
from __future__ import annotations

import sys


def main(argv=None) -> int:
    import torch
    from transformers import BertConfig, BertModel

    out, sequence, vocab = (argv or sys.argv[1:])[:3]
    torch.manual_seed(0)
    config = BertConfig(vocab_size=int(vocab), hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=512, max_position_embeddings=64)
    bert = BertModel(config, add_pooling_layer=False).eval()

    class Encoder(torch.nn.Module):
        """Positional inputs in, the hidden states out (BertModel's forward takes keywords)."""

        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    ids = torch.randint(0, int(vocab), (1, int(sequence)))
    mask = torch.ones(1, int(sequence), dtype=torch.int64)
    with torch.no_grad():
        torch.onnx.export(Encoder().eval(), (ids, mask), out, input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"], opset_version=17, dynamo=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
