//! `--observe` on hosts whose answer is known: fixtures written by hand in the kernel's
//! and ethtool's documented formats (tests/fixtures/*.txt), expanded into a directory
//! per reading and read through the same code as this host.

use linerate_hostinfo::observe::{observe, read_settings, HostReading};
use linerate_hostinfo::source::Root;
use linerate_model::observe::Observation;
mod common;
use common::expand;

fn observe_fixture(bundle: &str) -> Observation {
    let dir = expand(bundle, bundle.trim_end_matches(".txt"));
    let before = HostReading::read(&Root::fixture(dir.join("before")));
    let after_root = Root::fixture(dir.join("after"));
    let after = HostReading::read(&after_root);
    let observation = observe(&before, &after, 2.0, read_settings(&after_root));
    let _ = std::fs::remove_dir_all(&dir);
    observation
}

#[test]
fn one_busy_receive_queue_and_one_interrupt_cpu_are_called_out() {
    let o = observe_fixture("mlx5-one-busy-queue.txt");
    let nic = o
        .interfaces
        .iter()
        .find(|i| i.name == "ens1f0")
        .expect("the NIC moved packets");
    assert_eq!(nic.driver.as_deref(), Some("mlx5_core"));
    assert_eq!((nic.rx_packets, nic.tx_packets), (1_000_000, 500_000));
    assert_eq!(nic.speed_mbps, Some(100_000));
    let shares: Vec<(u32, u64)> = nic
        .rx_queues
        .iter()
        .map(|q| (q.queue, q.packets.unwrap()))
        .collect();
    assert_eq!(shares, vec![(0, 980_000), (1, 10_000), (2, 10_000), (3, 0)]);
    assert!((nic.rx_queues[0].share.unwrap() - 0.98).abs() < 1e-9);
    // Every queue's completion interrupts fired on CPU 0.
    assert!(
        nic.rx_queues.iter().all(|q| q.irq_cpu == Some(0)),
        "{nic:?}"
    );
    assert_eq!(nic.qdisc.as_deref(), Some("mq"));
    let coalesce = nic.coalesce.unwrap();
    assert_eq!((coalesce.rx_usecs, coalesce.adaptive_rx), (64, false));
    let rings = nic.rings.unwrap();
    assert_eq!((rings.rx, rings.rx_max), (1024, 8192));
    assert_eq!(nic.offloads.get("large-receive-offload"), Some(&false));
    // mlx5_comp0 grouped as queue 0 of device mlx5_comp, on the NIC by its PCI address.
    let comp0 = o
        .interrupts
        .iter()
        .find(|s| s.device == "mlx5_comp" && s.queue == Some(0))
        .unwrap();
    assert_eq!(comp0.total, 400_000);
    assert_eq!(comp0.interface.as_deref(), Some("ens1f0"));
    // softnet: 0x800 drops and 0x400 squeezes on CPU 0; CPU 0 99 % in softirq.
    assert_eq!((o.cpus[0].dropped, o.cpus[0].squeezed), (0x800, 0x400));
    assert_eq!(o.cpus[0].net_rx, 400_000);
    assert!(o.cpus[0].softirq_pct > 95.0, "{:?}", o.cpus[0]);
    assert_eq!(o.counters.get("TcpRetransSegs"), Some(&50));
    assert!(
        !o.counters.contains_key("UdpInDatagrams"),
        "unmoved counters are left out"
    );
    assert_eq!(o.settings.congestion_control.as_deref(), Some("cubic"));

    let said = o.unusual.join("\n");
    for expected in [
        "ens1f0: rx queue 0 carried 98 % of the packets received (4 queues)",
        "ens1f0: the interrupts of all 4 receive queues went to CPU 0",
        "CPU 0: 2048 packets dropped at the backlog (netdev_max_backlog 1000)",
        "CPU 0: the softirq budget ran out 1024 times",
        "CPU 0: 99 % of the window in interrupts and softirqs",
    ] {
        assert!(said.contains(expected), "missing {expected:?} in:\n{said}");
    }
    assert!(
        !said.contains("tx queue"),
        "transmit is spread evenly:\n{said}"
    );
}

#[test]
fn evenly_spread_queues_are_not_unusual() {
    let o = observe_fixture("virtio-spread.txt");
    assert!(o.unusual.is_empty(), "{:?}", o.unusual);
    let nic = &o.interfaces[0];
    assert_eq!(nic.name, "eth0");
    let irq_cpus: Vec<Option<u32>> = nic.rx_queues.iter().map(|q| q.irq_cpu).collect();
    assert_eq!(irq_cpus, vec![Some(0), Some(1)]);
    let tx_cpus: Vec<Option<u32>> = nic.tx_queues.iter().map(|q| q.irq_cpu).collect();
    assert_eq!(tx_cpus, vec![Some(0), Some(1)]);
    // virtio20 is another device, not a queue of virtio2.
    let other = o
        .interrupts
        .iter()
        .find(|s| s.device == "virtio20-input")
        .unwrap();
    assert_eq!(other.interface, None);
    assert_eq!(o.cpus[1].net_rx, 21_000);
}
