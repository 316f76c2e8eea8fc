# Sourced by setup.sh and install_llm.sh: builds the packages that compile native code from
# source (hnswlib, llama.cpp's server) for x86-64-v3 (AVX2) at most, never for the CPU that
# happens to build them. Both build with -march=native by default; a wheel built so on a
# machine with AVX-512 dies of SIGILL on one without, and pip's own wheel cache keys a built
# wheel by its source only, so it would hand that wheel to any later install. The wheels built
# here are kept in a cache of their own, keyed by the build flags, where the machine keeps
# caches (XDG_CACHE_HOME, else ~/.cache): the first install on a machine compiles, later ones
# reuse. scripts/check_cpu_baseline.py --installed checks what was installed.

# Bump when the flags change: wheels built with other flags are then never reused.
PORTABLE_TAG="x86-64-v3.2"
PORTABLE_WHEELS="${XDG_CACHE_HOME:-$HOME/.cache}/llmcache/wheels/$PORTABLE_TAG"

# install_portable PYTHON NAME==VERSION [VAR=value ...]: build the wheel once (with the given
# environment) and install it, without its dependencies (the caller's own install has them).
install_portable() {
    local py="$1" requirement="$2"
    shift 2
    local name="${requirement%%==*}" version="${requirement#*==}"
    local pattern="${name//-/_}-${version}-*.whl"
    mkdir -p "$PORTABLE_WHEELS"
    if ! compgen -G "$PORTABLE_WHEELS/$pattern" > /dev/null; then
        env "$@" "$py" -m pip wheel --quiet --no-deps --no-cache-dir --no-binary "$name" \
            -w "$PORTABLE_WHEELS" "$requirement"
    fi
    local wheel
    wheel=$(compgen -G "$PORTABLE_WHEELS/$pattern" | head -n 1)
    "$py" -m pip install --quiet --no-deps --force-reinstall "$wheel"
}

# The compiler flags of that baseline, where it applies (elsewhere the packages' defaults).
if [[ "$(uname -m)" == "x86_64" ]]; then
    PORTABLE_MARCH="-march=x86-64-v3"
    PORTABLE_GGML="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
else
    PORTABLE_MARCH=""
    PORTABLE_GGML=""
fi
