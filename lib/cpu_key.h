/* cpu_key.h: the name of this host's CPU kind, as the tuner's fitted rows are keyed
 * (transports/transport.h, weft__transport_model_fit). */
#ifndef WEFT_LIB_CPU_KEY_H
#define WEFT_LIB_CPU_KEY_H

/* This host's CPU as "<vendor> <family>/<model>", the vendor string and the display family
 * and model numbers cpuid gives (the "vendor_id", "cpu family" and "model" lines of
 * /proc/cpuinfo; Intel SDM vol. 2A, CPUID leaf 01H): "GenuineIntel 6/167", "AuthenticAMD
 * 26/2". "" where cpuid is not available (not x86). Read once; the string stays valid for
 * the life of the process. Thread-safe. */
const char *weft__cpu_key(void);

#endif
