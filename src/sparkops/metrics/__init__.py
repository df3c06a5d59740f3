"""vLLM `/metrics`: scraping (scrape.py, thin I/O edge) and the maths over samples (pure)."""
