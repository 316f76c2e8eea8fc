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

# build_portable PYTHON NAME==VERSION [VAR=value ...]: build the wheel into the cache (with the
# given environment) unless it is there already. Needs nothing installed but pip: the build runs
# in pip's build isolation, so setup.sh runs the long one (llama.cpp) beside its other installs.
build_portable() {
    local py="$1" requirement="$2"
    shift 2
    local name="${requirement%%==*}"
    mkdir -p "$PORTABLE_WHEELS"
    if ! portable_wheel "$requirement" > /dev/null; then
        env "$@" "$py" -m pip wheel --quiet --no-deps --no-cache-dir --no-binary "$name" \
            -w "$PORTABLE_WHEELS" "$requirement"
    fi
}

# portable_wheel NAME==VERSION: print the cached wheel's path; fail if it was never built.
portable_wheel() {
    local requirement="$1"
    local name="${requirement%%==*}" version="${requirement#*==}"
    local wheels
    wheels=$(compgen -G "$PORTABLE_WHEELS/${name//-/_}-${version}-*.whl") || return 1
    head -n 1 <<< "$wheels"
}

# install_portable PYTHON NAME==VERSION [VAR=value ...]: build the wheel once (build_portable)
# and install it, without its dependencies (the caller's own install has them).
install_portable() {
    local py="$1" requirement="$2"
    build_portable "$@"
    local wheel
    wheel=$(portable_wheel "$requirement")
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
