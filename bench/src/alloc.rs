//! The bench binary's `#[global_allocator]`, chosen by cargo feature: glibc malloc (no
//! feature, the baseline), `alloc-mimalloc` or `alloc-jemalloc`. Only this binary sets it;
//! the library crates stay allocator-neutral. The report header names the one in use.

#[cfg(all(feature = "alloc-mimalloc", feature = "alloc-jemalloc"))]
compile_error!("features `alloc-mimalloc` and `alloc-jemalloc` are exclusive: pick one");

#[cfg(feature = "alloc-mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(feature = "alloc-jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The allocator this binary was built with, for the report header.
pub const NAME: &str = if cfg!(feature = "alloc-mimalloc") {
    "mimalloc (feature alloc-mimalloc)"
} else if cfg!(feature = "alloc-jemalloc") {
    "jemalloc (feature alloc-jemalloc, tikv-jemallocator)"
} else {
    "glibc malloc (the system allocator; no alloc-* feature)"
};
