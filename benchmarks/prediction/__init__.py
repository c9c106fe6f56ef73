"""Latency prediction: how closely a learned predictor matches measured latency on held-out networks
(its p50 and p99 predictors), and how few measurements a predictor for a new device needs (transfer)."""
