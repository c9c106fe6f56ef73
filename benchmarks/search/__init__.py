"""Search: what the search costs and what it finds (framework overhead per trial, sampler quality at equal
budgets, predictor-driven screening speed), and searched networks against hand-designed references,
from digits to CIFAR-10 at the deployment budget."""
