// dsattn — DeepSeek Sparse Attention for serving engines. Umbrella header.
#pragma once
#include "dsattn/codecs.h"
#include "dsattn/formats.h"
#include "dsattn/geometry.h"
#include "dsattn/ops.h"
#include "dsattn/status.h"
#include "dsattn/tensor.h"
#include "dsattn/version.h"
