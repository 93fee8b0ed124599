"""Precision defects the corpus run (bench/corpus/corpus.py) found, pinned by the corpus model itself
(generated from the installed onnx's test cases)."""

from __future__ import annotations

import onnx

from bench.corpus.corpus_data import node_cases
from trtpipe.precision.materialize.materialize import materialize, name_unnamed_nodes


def test_ops_outside_the_default_domain_keep_their_types():
    # Corpus: test_ai_onnx_ml_tree_ensemble_set_membership. Retyped to FP16, TreeEnsemble's FLOAT
    # `nodes_splits` attribute no longer matched its input and the result failed the checker
    # (and its Casts needed a default-domain import the model does not have).
    model = next(case.model for case in node_cases(["ai_onnx_ml.tree_ensemble"])
                 if case.name == "test_ai_onnx_ml_tree_ensemble_set_membership")
    assert all(entry.domain == "ai.onnx.ml" for entry in model.opset_import)
    name_unnamed_nodes(model)
    mixed, report = materialize(model, {node.name: "fp16" for node in model.graph.node})
    onnx.checker.check_model(mixed, full_check=True)
    assert report["casts_added"]["count"] == 0
    assert "ai.onnx.ml::TreeEnsemble is not a default-domain op" in report["precision_not_applied"][0]["reason"]
    assert [v.type for v in mixed.graph.input] == [v.type for v in model.graph.input]
