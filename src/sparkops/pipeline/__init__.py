"""A layered decision pipeline: validated spec, prompt building, answer parsing, routing.

Pure: nothing here does I/O except `spec.load_pipeline`, which reads the YAML and its
prompt files once, so everything downstream works on plain validated objects.
"""
