"""Data only: the Python API names of real TensorRT releases (made by `python -m bench.trt.trt_surface`)."""
