use joule::inference::kernels::memory_read::read_pass;
use std::time::Instant;
fn alloc(bytes: usize, huge: bool) -> &'static mut [u64] {
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            bytes + (2 << 20),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        ) as usize;
        let a = (p + (2 << 20) - 1) & !((2 << 20) - 1);
        libc::madvise(
            a as *mut _,
            bytes,
            if huge {
                libc::MADV_HUGEPAGE
            } else {
                libc::MADV_NOHUGEPAGE
            },
        );
        let s = std::slice::from_raw_parts_mut(a as *mut u64, bytes / 8);
        for (i, w) in s.iter_mut().enumerate() {
            *w = i as u64;
        }
        s
    }
}
fn main() {
    let gb = 1usize << 30;
    let a = alloc(gb, false);
    let b = alloc(gb, true);
    let st = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap();
    println!(
        "{}",
        st.lines()
            .filter(|l| l.contains("AnonHuge"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    for r in 0..8 {
        let t = Instant::now();
        let x = read_pass(a);
        let ta = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let y = read_pass(b);
        let tb = t.elapsed().as_secs_f64();
        println!(
            "round {r}: 4K {:.1} GB/s  THP {:.1} GB/s  ratio {:.2} {}",
            gb as f64 / ta / 1e9,
            gb as f64 / tb / 1e9,
            ta / tb,
            (x ^ y) & 1
        );
    }
}
