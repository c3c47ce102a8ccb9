raise RuntimeError("demo_broken.cpu_python: a bug in an installed implementation module")
