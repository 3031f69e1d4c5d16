#!/bin/busybox sh
# /init of the daros-vmtest initramfs (PID 1 in the guest).
# Builds a pure cgroup-v2 userspace over the host's root filesystem and runs the job:
#   /host   host root over 9p, read-only     /job  the job directory over 9p, read-write
#   /newroot = overlay(lower /host, upper tmpfs): the job runs chrooted there.
# Any failure before the job starts powers off without a status file: the host
# reports that as 125 and prints the console and guest kernel log.
/bin/busybox --install -s /bin
export PATH=/bin

say() { echo "daros-vm-init: $*"; }
off() { sync; poweroff -f; }
die() {
	say "$*"
	dmesg | tail -n 60
	if [ -d /job/.vm ]; then dmesg > /job/.vm/dmesg; fi
	off
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# The console is a tty: keep "\n" as it is so output reaches the host unchanged.
stty -onlcr 2>/dev/null

load() {
	while read -r m; do
		insmod "/lib/modules/$m.ko" || say "insmod $m failed"
	done < "$1"
}
# ext4 for the IO disk loads on the other vCPU while the boot modules load here.
load /etc/daros-modules-disk &
disk_modules=$!
load /etc/daros-modules

p9=trans=virtio,version=9p2000.L,msize=512000
mkdir -p /host /job /rw /newroot
mount -t 9p -o "$p9,ro,cache=loose" hostroot /host || die "cannot mount the host root (9p)"
mount -t 9p -o "$p9" job /job || die "cannot mount the job share (9p)"
[ -r /job/.vm/vm.conf ] || die "the job share has no .vm/vm.conf"
. /job/.vm/vm.conf

mount -t tmpfs -o mode=0755 tmpfs /rw || die "cannot mount the tmpfs for the overlay"
mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work overlay /newroot ||
	die "cannot mount the overlay root"

R=/newroot
mount -t proc proc $R/proc || die "cannot mount /proc"
mount -t sysfs sysfs $R/sys || die "cannot mount /sys"
mount -t devtmpfs devtmpfs $R/dev || die "cannot mount /dev"
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts $R/dev/pts
mount -t tmpfs -o mode=1777 tmpfs $R/dev/shm
mount -t tmpfs -o mode=0755 tmpfs $R/run
mount -t cgroup2 -o nsdelegate,memory_recursiveprot cgroup2 $R/sys/fs/cgroup ||
	die "cannot mount cgroup2 on /sys/fs/cgroup"
for c in cpuset cpu io memory hugetlb pids rdma misc; do
	echo "+$c" > $R/sys/fs/cgroup/cgroup.subtree_control || say "cannot enable the $c controller"
done
mount -t bpf -o mode=0700 bpf $R/sys/fs/bpf || say "cannot mount bpffs"
mount -t tracefs tracefs $R/sys/kernel/tracing || say "cannot mount tracefs"
mount -t debugfs debugfs $R/sys/kernel/debug || say "cannot mount debugfs"
mkdir -p $R/run/daros-job
mount --bind /job $R/run/daros-job || die "cannot bind the job share"
if [ "$DISK" = 1 ]; then
	wait $disk_modules
	[ -b /dev/vda ] || die "the IO test disk /dev/vda is missing"
	mkdir -p $R/mnt/vmdisk
	mount -t ext4 /dev/vda $R/mnt/vmdisk || die "cannot mount /dev/vda on /mnt/vmdisk"
fi
ip link set lo up || say "cannot bring up lo"
hostname daros-vm

# Last line of defence if the host runner died: the guest powers itself off.
(sleep "$WATCHDOG_S" && say "guest watchdog expired after ${WATCHDOG_S}s" && dmesg > /job/.vm/dmesg && off) &

cat /proc/uptime > /job/.vm/boot-uptime
if [ "$SYSTEMD" = 1 ]; then
	# systemd as PID 1 over the same root: the job is a service of a target
	# that pulls in nothing else; when it ends the guest powers off at once.
	U=$R/etc/systemd/system
	mkdir -p $U
	cat > $U/daros-vmjob.target <<-EOF
	[Unit]
	Description=daros-vmtest job
	Requires=daros-vmjob.service
	After=daros-vmjob.service
	AllowIsolate=yes
	EOF
	cat > $U/daros-vmjob.service <<-EOF
	[Unit]
	Description=daros-vmtest job
	DefaultDependencies=no
	After=systemd-journald.socket
	[Service]
	Type=oneshot
	StandardInput=null
	StandardOutput=journal
	StandardError=journal
	ExecStart=/bin/sh -c '/bin/sh /run/daros-job/.vm/job.sh; dmesg > /run/daros-job/.vm/dmesg; sync; echo 0 > /proc/sys/kernel/printk; systemctl poweroff --force --force'
	EOF
	# No getty or other console chatter from the host's units.
	ln -sf /dev/null $U/getty@.service
	ln -sf /dev/null $U/serial-getty@.service
	ln -sf /dev/null $U/console-getty.service
	exec switch_root $R /lib/systemd/systemd --unit=daros-vmjob.target --show-status=false --log-level=warning < /dev/console
fi
chroot $R /bin/sh /run/daros-job/.vm/job.sh < /dev/null
dmesg > /job/.vm/dmesg
umount $R/mnt/vmdisk 2>/dev/null
# Console loglevel 0: no "reboot: Power down" line after the job's output.
echo 0 > /proc/sys/kernel/printk
off
