/* acemq/acemq.h — the umbrella header: everything that needs no third-party header. */
#ifndef ACEMQ_ACEMQ_H
#define ACEMQ_ACEMQ_H

#include "acemq/common.h"
#include "acemq/log.h"
#include "acemq/idem.h"
#include "acemq/audit.h"

#endif
