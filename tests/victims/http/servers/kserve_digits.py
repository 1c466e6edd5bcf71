"""A KServe Python model server for the real-server tests, run by the kserve environment's python
(tests/servers/envs.py): a one-hidden-layer ReLU network read from an .npz (w1, b1, w2, b2),
answering softmax probabilities over V1 ({"instances"} → {"predictions"}) and V2 (FP64 in, FP64
out), with its metadata declared; beside it a model `cold` whose health check says it is not ready
(KServe's 503 ModelNotReady).

    python kserve_digits.py WEIGHTS.npz HTTP_PORT GRPC_PORT MODEL_NAME
"""

from __future__ import annotations

import sys

import numpy as np
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer


class Digits(Model):
    def __init__(self, name: str, path: str, never_ready: bool):
        super().__init__(name)
        self.path, self.never_ready = path, never_ready
        self.load()

    def load(self) -> bool:
        w = np.load(self.path)
        self.w1, self.b1, self.w2, self.b2 = (w[k].astype(np.float64) for k in ("w1", "b1", "w2", "b2"))
        self.ready = True  # KServe registers only models ready at start ...
        return self.ready

    async def healthy(self) -> bool:
        return not self.never_ready  # ... so `cold` says it is not ready when asked

    def get_input_types(self):
        return [{"name": "x", "datatype": "FP64", "shape": [-1, self.w1.shape[1]]}]

    def get_output_types(self):
        return [{"name": "probabilities", "datatype": "FP64", "shape": [-1, self.w2.shape[0]]}]

    def probs(self, x: np.ndarray) -> np.ndarray:
        z = np.maximum(x @ self.w1.T + self.b1, 0.0) @ self.w2.T + self.b2
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    async def predict(self, payload, headers=None, response_headers=None):
        if isinstance(payload, InferRequest):
            x = payload.inputs[0].as_numpy().astype(np.float64).reshape(-1, self.w1.shape[1])
            p = self.probs(x)
            out = InferOutput(name="probabilities", shape=list(p.shape), datatype="FP64", data=p)
            return InferResponse(model_name=self.name, infer_outputs=[out], response_id=payload.id or "0")
        x = np.asarray(payload["instances"], dtype=np.float64)
        return {"predictions": self.probs(x).tolist()}


if __name__ == "__main__":
    weights, http_port, grpc_port, name = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    models = [Digits(name, weights, False), Digits("cold", weights, True)]
    ModelServer(http_port=http_port, grpc_port=grpc_port, enable_grpc=False, workers=1).start(models)
