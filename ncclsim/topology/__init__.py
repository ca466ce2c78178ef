"""NCCL topology files: written from the cluster model (xml_writer) and checked (validate)."""
