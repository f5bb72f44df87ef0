"""Packaging for tvm_hybrid_nb."""
from setuptools import find_packages, setup

setup(
    name="tvm_hybrid_nb",
    version="0.1.0",
    description="Hybrid-script backend for Apache TVM in Jupyter: runnable numpy source for every "
    "compiler pass, exact emulation, pass explorer and emulate-and-compare widgets.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["tvm_hybrid_nb", "tvm_hybrid_nb.*"]),
    python_requires=">=3.10",
    install_requires=[
        "apache-tvm==0.27.0.post1",
        # 0.1.15.x makes tvm.ir.save_json segfault on any node; <=0.1.13 does not load.
        "apache-tvm-ffi==0.1.14.post1",
        "numpy>=1.26",
        "ipython>=8",
        "ipywidgets>=8",
        "pygments>=2.15",
        "matplotlib>=3.7",
        # verify: progress bars on the command line; schedules and custom passes shipped to workers
        "tqdm>=4.60",
        "cloudpickle>=2",
    ],
    extras_require={
        # verify(client=...) / --scheduler: run the kernels on a Dask cluster
        "cluster": ["distributed>=2023.1"],
        "test": [
            "distributed>=2023.1",
            "pytest>=7",
            # the tests run on every core, one test file per worker (module fixtures are built once)
            "pytest-xdist>=3",
            "nbclient>=0.9",
            "nbformat>=5.9",
            "ipykernel>=6",
            "jupyterlab>=4,<5",
            "playwright>=1.40",
            # the ipywidgets 8 front end for JupyterLab 4 (the browser test renders the explorer)
            "jupyterlab_widgets>=3,<4",
        ],
    },
    entry_points={"console_scripts": ["tvm-hybrid-nb=tvm_hybrid_nb.cli:main"]},
)
