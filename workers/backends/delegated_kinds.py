"""The Kubeflow kinds a worker in delegate mode hands to a member's Training Operator, where
they live in the API, and the `runPolicy.managedBy` that operator reconciles (plain data, so
that RBAC printing and the sandbox need no cluster library)."""

from __future__ import annotations

KUBEFLOW_GROUP = "kubeflow.org"
KUBEFLOW_VERSION = "v1"
TRAINING_OPERATOR = "kubeflow.org/training-operator"
"""The `runPolicy.managedBy` the Training Operator reconciles (as an unset one)."""
DELEGATED_PLURALS = {
    "PyTorchJob": "pytorchjobs",
    "TFJob": "tfjobs",
    "XGBoostJob": "xgboostjobs",
    "PaddleJob": "paddlejobs",
    "JAXJob": "jaxjobs",
    "MPIJob": "mpijobs",
}
"""The kinds the Training Operator v1.9 runs (all six it serves), and their resources."""
