"""`ncclsim topo render`: pictures of a preset, a spec, topology XML or a run
(NCCL's rings and trees over the run's hosts). It stands above both the
topology package (graphs, drawing, picture files) and the report (a run's
view), which is why it is a package of its own."""
