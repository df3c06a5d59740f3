"""`sparkops batch serve`: OpenAI's Files and Batches API over the kit's job folders.

A researcher's `openai` script uploads a batch file, creates a batch, polls it and downloads
its output; here every batch is a kit job folder run by `sparkops batch run` (the same engine,
journal and resume), and the server's whole state is folders under one root, no database:

- `objects.py`: the API's objects (Batch, FileObject, lists, errors) as the `openai` package's
  types define them, and the small state kept per file and per batch (pure);
- `store.py`: the root on disk (uploaded files, a folder per batch, atomic writes, one server
  per root);
- `outputs.py`: a finished job's results split into OpenAI's output and error files;
- `input_check.py`: a create request and its input file checked before anything runs;
- `runner.py`: the queue (one batch at a time) and its `sparkops batch run` child process;
- `routes.py`: the HTTP routes and the API key;
- `server.py`: the command (options, address and key rules, start, resume, stop).
"""
