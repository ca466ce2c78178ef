"""`ncclsim report`: what NCCL built in a run (rings, trees, transports, tuning), from its logs and dumps
(build.build_report; summary.summary_text prints it, model.Report is its run.json)."""
