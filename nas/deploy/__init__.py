"""After the search: a candidate exported (``python -m nas.export``) and made ready to deploy
(``python -m nas.optimize``).

* :mod:`nas.deploy.export`: the export of one candidate as a verified, self-contained folder,
  its report (:mod:`nas.deploy.export_report`) and the Conv+BN fusion it ships
  (:mod:`nas.deploy.fuse`);
* :mod:`nas.deploy.candidate`: the exported candidate read back (weights, shape, preprocessing, record);
* :mod:`nas.deploy.calibration`: the INT8 calibration set, checked before any work;
* :mod:`nas.deploy.variants`: each variant as a verified artefact: INT8 (ONNX Runtime static
  quantisation; TensorRT engines), FP16/BF16, and its figures on the validation split;
* :mod:`nas.deploy.prune`: structured channel pruning: sensitivity, the progressive schedule,
  BatchNorm recalibration, fine-tuning with knowledge distillation (:mod:`nas.deploy.distill`);
* :mod:`nas.deploy.report`: the per-candidate table and its regression check;
* :mod:`nas.deploy.optimize`: the pipeline.
"""
