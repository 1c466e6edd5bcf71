"""ReRo bounds (paper 004, Sec. VII): the DP guarantee of the deployed model turned into an upper
bound γ on the success probability of ANY reconstruction attack, for a stated adversary prior.

`priors` — baseline κ(η) per prior; `bounds` — γ from ε-DP, (ε, δ)-DP, RDP, zCDP, privacy profile,
μ-GDP, and Thm. 5 (ReRo → DP); `accounting` — the curves of the victim's own DP-SGD run (Opacus);
`product` — the report's `rero` section, the bound-vs-measurement check and the γ-vs-ε plot.
The first three are pure math (numpy/scipy/torch only) and testable alone.
"""
