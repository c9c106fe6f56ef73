"""Accuracy and fidelity: how well the cheap accuracy estimates a search ranks by agree with full training
(proxy and rung fidelity, the reference's own noise, a weight-sharing supernet), and how fast a CPU trains."""
