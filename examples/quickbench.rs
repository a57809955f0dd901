use std::time::Instant;
fn main() {
    let dir = std::env::temp_dir().join(format!("qb-{}", std::process::id()));
    let q = steadq::Queue::create(&dir, steadq::Options { durability: steadq::Durability::None, shards: 8, force_named_publish: std::env::var_os("NAMED").is_some(), ..Default::default() }).unwrap();
    let n = 20000;
    let t = Instant::now();
    for i in 0..n { q.enqueue(format!("job {i}").as_bytes()).unwrap(); }
    let e = t.elapsed();
    let t = Instant::now();
    let mut c = 0;
    while let Some(l) = q.claim().unwrap() { l.ack().unwrap(); c += 1; }
    println!("enqueue {:?} ({:.0}/s), claim+ack {} in {:?} ({:.0}/s)", e, n as f64 / e.as_secs_f64(), c, t.elapsed(), c as f64 / t.elapsed().as_secs_f64());
    std::fs::remove_dir_all(&dir).unwrap();
}
