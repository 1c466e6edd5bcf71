"""The machinery of the exact extraction attacks on ReLU networks: searching lines for the kinks
a ReLU network's units leave in its answers, and turning kinks into weights. The attacks that use
it sit one folder up (`gradient_exact`, `finite_difference_exact`, `query_learning`,
`cryptanalytic`); nothing here is an attack of its own.

One hidden layer (paper 000: Milli et al. 2019; paper 001: Jagielski et al. 2020):
- `relu_lines`: kinks on random lines from values, the output layer, the check on fresh queries
  (000 Alg. 1a/1b, App. C).
- `exact`: the shared driver of the exact attacks: lines → hyperplanes → output layer → self-check,
  restarting at the worst check point; tolerances measured from the answers (000 Alg. 1, App. B–C;
  Carlini et al. 2020 Sec. 4–6 on precision).
- `fd_rows`: first-layer rows from finite-difference Jacobians between cells (000 App. C).
- `line_pieces`: a Gaussian line's clean pieces for query_learning (001 Alg. 2–3).
- `piecewise`: the test that the deployed function is piecewise linear at all (the assumption).

Deep networks (Carlini, Jagielski, Mironov, CRYPTO 2020, Sec. 4; Canales-Martínez et al.,
EUROCRYPT 2024, for signs):
- `deep_model`: the extracted network and the prefix known so far.
- `kink_search`: critical points on lines and their gradient jumps.
- `neuron_walk`: one next-layer neuron, followed along its critical surface (Rolnick & Kording 2020);
  `neuron_system`: that neuron's homogeneous linear system, solved by SVD.
- `layer_signs`: a layer's signs from the layer above.
- `deep_extract`: the layer-by-layer driver.
- `plane_refine`: hyperplanes refined from many points in float64 (Sec. 4–6).
- `precision_bits`: the output bits a successful run needed, by replaying it against its own copy.
"""
