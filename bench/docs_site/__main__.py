"""`python -m bench.docs_site [--record]`: regenerate the manual's pictures (figures.py)."""

if __name__ == "__main__":
    import sys

    from bench.docs_site.figures import main

    sys.exit(main())
