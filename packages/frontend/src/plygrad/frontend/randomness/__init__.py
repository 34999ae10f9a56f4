"""Random numbers, in one place: `stream` (the seeded, stateful Threefry stream behind `rand`, and the in-graph
counter), `draws` (`rand`, `randn`, `randint`, the initializers, `randperm`, `multinomial`, `dropout`) and `keyed`
(tinygrad's stateless `Tensor.random_bits`). docs/frontend.md, "Randomness".

This package imports none of its modules: `stream` is imported by the core, and `draws` imports the core.
"""
