// ytk TensorRT plugin shim: the part shared by IPluginV2DynamicExt (TensorRT 8.6) and IPluginV3 (TensorRT 10+).
//
// This file is a template read by ytk_backend_nvcc/trt_shim.py: its markers (an upper-case name between two
// pairs of at-signs) are replaced by the contract generated from plugin_meta; everything else is compiled as
// written. It is appended to the kernel's translation unit, after the kernel source, so the extern "C" launcher
// it declares again (a mismatch with the kernel's own declaration is a compile error) is already defined.
//
// Linking: nothing here calls into libnvinfer. The plugin is meant to be loaded with trtexec
// --dynamicPlugins / IPluginRegistry::loadLibrary, which call the exported getPluginCreators (V2) or
// getCreators (V3) and setLoggerFinder; TensorRT registers the returned creators itself. The header's
// inline code that would need libnvinfer (getPluginRegistry, createInferRuntime, ...) is never used, and the
// build links with -z defs so that any such reference fails the build instead of the engine load.

// IPluginV2* and IPluginCreator are deprecated in TensorRT 10 but still the interface TensorRT 8.6 has; the
// headers' own inline code uses deprecated enumerators; overriding the dynamic-shape overloads hides the
// implicit-batch ones (which IPluginV2DynamicExt makes private and final); not every helper is used by both
// interfaces.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#ifdef __NVCC__
#pragma nv_diag_suppress 177
#pragma nv_diag_suppress 997
#pragma nv_diag_suppress 1215
#pragma nv_diag_suppress 1444
#endif

#include <NvInferRuntime.h>
#include <NvInferVersion.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#if !defined(NV_TENSORRT_MAJOR) || !defined(NV_TENSORRT_MINOR)
#error "ytk shim: NvInferVersion.h did not define NV_TENSORRT_MAJOR/NV_TENSORRT_MINOR"
#endif
// The headers must be those of the target's TensorRT (the arch spec's trtNN).
#if NV_TENSORRT_MAJOR != @@EXPECT_MAJOR@@ || (@@EXPECT_MINOR@@ >= 0 && NV_TENSORRT_MINOR != @@EXPECT_MINOR@@)
#error "ytk shim: the TensorRT headers found are not the target's version (see the arch spec's trtNN)"
#endif

extern "C" int @@LAUNCHER@@(void const* const* inputs, void* const* outputs, int64_t const* extents, void* workspace,
                          cudaStream_t stream);
@@WORKSPACE_DECL@@

namespace
{
namespace ytk
{
using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::TensorFormat;

// ---- integer arithmetic of the shape expressions at run time (Python semantics) ---------------------------
int64_t floorDiv(int64_t a, int64_t b, bool& ok) noexcept
{
    if (b == 0)
    {
        ok = false;
        return 0;
    }
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
    {
        --q;
    }
    return q;
}

int64_t ceilDiv(int64_t a, int64_t b, bool& ok) noexcept
{
    return -floorDiv(-a, b, ok);
}

int64_t dimOf(Dims const* dims, int32_t count, int32_t tensor, int32_t axis, bool& ok) noexcept
{
    if (dims == nullptr || tensor >= count || axis >= dims[tensor].nbDims)
    {
        ok = false;
        return 0;
    }
    return static_cast<int64_t>(dims[tensor].d[axis]);
}

std::string dimsText(Dims const& dims)
{
    std::string s = "[";
    for (int32_t i = 0; i < dims.nbDims; ++i)
    {
        s += (i ? ", " : "") + std::to_string(static_cast<int64_t>(dims.d[i]));
    }
    return s + "]";
}

// ---- the contract, generated from plugin_meta -------------------------------------------------------------
@@CONTRACT@@

// ---- one global logger --------------------------------------------------------------------------------------
// TensorRT hands its logger finder to the library once (setLoggerFinder); every plugin and creator of this
// library logs through it. Before that (or when the finder has no logger) errors go to stderr.
std::mutex gLogMutex;
nvinfer1::ILoggerFinder* gLoggerFinder = nullptr;

void log(nvinfer1::ILogger::Severity severity, std::string const& message) noexcept
{
    try
    {
        std::string const text = std::string("[ytk plugin ") + kDisplayName + "] " + message;
        nvinfer1::ILogger* logger = nullptr;
        {
            std::lock_guard<std::mutex> lock(gLogMutex);
            if (gLoggerFinder != nullptr)
            {
                logger = gLoggerFinder->findLogger();
            }
        }
        if (logger != nullptr)
        {
            logger->log(severity, text.c_str());
        }
        else if (severity <= nvinfer1::ILogger::Severity::kWARNING)
        {
            std::fprintf(stderr, "%s\n", text.c_str());
        }
    }
    catch (...)
    {
    }
}

void logError(std::string const& message) noexcept
{
    log(nvinfer1::ILogger::Severity::kERROR, message);
}

// ---- plugin attributes: kept as given, serialised and restored --------------------------------------------
// Whatever fields the engine builder passes (the ONNX node's attributes) are kept, written into the engine
// and handed back at deserialisation, together with the contract fingerprint that ties an engine to the
// plugin_meta it was built against.
constexpr char kFingerprintField[] = "ytk_contract";

size_t fieldBytes(nvinfer1::PluginFieldType type, int32_t length) noexcept
{
    if (length < 0)
    {
        return 0;
    }
    size_t const n = static_cast<size_t>(length);
    switch (static_cast<int32_t>(type)) // by value: the enumerators differ between TensorRT versions
    {
    case 0: return 2 * n;            // kFLOAT16
    case 1: return 4 * n;            // kFLOAT32
    case 2: return 8 * n;            // kFLOAT64
    case 3: return n;                // kINT8
    case 4: return 2 * n;            // kINT16
    case 5: return 4 * n;            // kINT32
    case 6: return n;                // kCHAR
    case 7: return sizeof(Dims) * n; // kDIMS
    case 9: return 2 * n;            // kBF16 (10.x)
    case 10: return 8 * n;           // kINT64 (10.x)
    case 11: return n;               // kFP8 (10.x)
    case 12:                         // kINT4 (10.x), two per byte
    case 13: return (n + 1) / 2;     // kFP4 (10.x), two per byte
    default: return static_cast<size_t>(-1);
    }
}

struct Field
{
    std::string name;
    nvinfer1::PluginFieldType type;
    int32_t length;
    std::vector<char> data;
};

class Fields
{
public:
    // Keeps every field of `fc` (a name, a known type and data), and says which it dropped.
    bool assign(nvinfer1::PluginFieldCollection const* fc, std::string& why)
    {
        mFields.clear();
        if (fc == nullptr)
        {
            return true;
        }
        if (fc->nbFields < 0 || (fc->nbFields > 0 && fc->fields == nullptr))
        {
            why = "malformed PluginFieldCollection";
            return false;
        }
        for (int32_t i = 0; i < fc->nbFields; ++i)
        {
            nvinfer1::PluginField const& f = fc->fields[i];
            size_t const bytes = fieldBytes(f.type, f.length);
            if (f.name == nullptr || bytes == static_cast<size_t>(-1) || (bytes > 0 && f.data == nullptr))
            {
                why = std::string("attribute ") + (f.name ? f.name : "(unnamed)") + " has no data of a known type";
                return false;
            }
            Field kept{f.name, f.type, f.length, std::vector<char>(bytes)};
            if (bytes > 0)
            {
                std::memcpy(kept.data.data(), f.data, bytes);
            }
            mFields.push_back(std::move(kept));
        }
        return true;
    }

    Field const* find(char const* name) const noexcept
    {
        for (Field const& f : mFields)
        {
            if (f.name == name)
            {
                return &f;
            }
        }
        return nullptr;
    }

    // The fingerprint recorded with the fields, when there is one, must be this library's contract.
    bool fingerprintMatches(std::string& why) const
    {
        Field const* f = find(kFingerprintField);
        if (f == nullptr)
        {
            return true;
        }
        std::string const got(f->data.begin(), f->data.end());
        if (got != kFingerprint)
        {
            why = "the engine was built against another plugin_meta (contract " + got.substr(0, 12) + "..., this library "
                + std::string(kFingerprint).substr(0, 12) + "...); rebuild the engine with this plugin";
            return false;
        }
        return true;
    }

    // Adds (or replaces) the contract fingerprint, so it is serialised with the attributes.
    void stampFingerprint()
    {
        mFields.erase(std::remove_if(mFields.begin(), mFields.end(),
                          [](Field const& f) { return f.name == kFingerprintField; }),
            mFields.end());
        size_t const n = std::strlen(kFingerprint);
        mFields.push_back(Field{kFingerprintField, nvinfer1::PluginFieldType::kCHAR, static_cast<int32_t>(n),
            std::vector<char>(kFingerprint, kFingerprint + n)});
    }

    // A collection pointing into this object (valid until it changes).
    nvinfer1::PluginFieldCollection const* collection()
    {
        mViews.clear();
        for (Field const& f : mFields)
        {
            mViews.emplace_back(f.name.c_str(), f.data.empty() ? nullptr : f.data.data(), f.type, f.length);
        }
        mCollection.nbFields = static_cast<int32_t>(mViews.size());
        mCollection.fields = mViews.empty() ? nullptr : mViews.data();
        return &mCollection;
    }

    // Serialised form: "YTKF", count, then per field: name length, name, type, length, byte count, bytes.
    size_t serializedSize() const noexcept
    {
        size_t n = 4 + sizeof(uint32_t);
        for (Field const& f : mFields)
        {
            n += sizeof(uint32_t) + f.name.size() + 2 * sizeof(int32_t) + sizeof(uint32_t) + f.data.size();
        }
        return n;
    }

    void serialize(void* buffer) const noexcept
    {
        char* p = static_cast<char*>(buffer);
        std::memcpy(p, "YTKF", 4);
        p += 4;
        put(p, static_cast<uint32_t>(mFields.size()));
        for (Field const& f : mFields)
        {
            put(p, static_cast<uint32_t>(f.name.size()));
            std::memcpy(p, f.name.data(), f.name.size());
            p += f.name.size();
            put(p, static_cast<int32_t>(f.type));
            put(p, f.length);
            put(p, static_cast<uint32_t>(f.data.size()));
            if (!f.data.empty())
            {
                std::memcpy(p, f.data.data(), f.data.size());
                p += f.data.size();
            }
        }
    }

    bool deserialize(void const* data, size_t length, std::string& why)
    {
        mFields.clear();
        char const* p = static_cast<char const*>(data);
        char const* const end = p + length;
        uint32_t count = 0;
        if (data == nullptr || length < 4 + sizeof(uint32_t) || std::memcmp(p, "YTKF", 4) != 0)
        {
            why = "serialised plugin data is not a ytk plugin's";
            return false;
        }
        p += 4;
        get(p, end, count);
        for (uint32_t i = 0; i < count; ++i)
        {
            uint32_t nameLen = 0;
            uint32_t bytes = 0;
            int32_t type = 0;
            int32_t len = 0;
            if (!get(p, end, nameLen) || static_cast<size_t>(end - p) < nameLen)
            {
                why = "serialised plugin data is truncated";
                return false;
            }
            std::string name(p, nameLen);
            p += nameLen;
            if (!get(p, end, type) || !get(p, end, len) || !get(p, end, bytes) || static_cast<size_t>(end - p) < bytes
                || fieldBytes(static_cast<nvinfer1::PluginFieldType>(type), len) != bytes)
            {
                why = "serialised plugin data is truncated or corrupt";
                return false;
            }
            mFields.push_back(Field{std::move(name), static_cast<nvinfer1::PluginFieldType>(type), len,
                std::vector<char>(p, p + bytes)});
            p += bytes;
        }
        return true;
    }

private:
    template <typename T>
    static void put(char*& p, T v) noexcept
    {
        std::memcpy(p, &v, sizeof(T));
        p += sizeof(T);
    }

    template <typename T>
    static bool get(char const*& p, char const* end, T& v) noexcept
    {
        if (static_cast<size_t>(end - p) < sizeof(T))
        {
            return false;
        }
        std::memcpy(&v, p, sizeof(T));
        p += sizeof(T);
        return true;
    }

    std::vector<Field> mFields;
    std::vector<nvinfer1::PluginField> mViews;
    nvinfer1::PluginFieldCollection mCollection{};
};

// ---- what both interfaces do the same way -------------------------------------------------------------------
// supportsFormatCombination: exactly the declared type and format at each position (inputs, then outputs).
bool supports(int32_t pos, DataType type, TensorFormat format, int32_t nbInputs, int32_t nbOutputs) noexcept
{
    if (nbInputs != kNbInputs || nbOutputs != kNbOutputs || pos < 0 || pos >= kNbInputs + kNbOutputs)
    {
        return false;
    }
    return type == kTypes[pos] && format == kFormats[pos];
}

// Input ranks as the contract declares them (the shape expressions index into them).
bool ranksMatch(Dims const* in, int32_t nbInputs, std::string& why)
{
    if (nbInputs != kNbInputs)
    {
        why = "expects " + std::to_string(kNbInputs) + " input(s), got " + std::to_string(nbInputs);
        return false;
    }
    for (int32_t i = 0; i < kNbInputs; ++i)
    {
        if (in[i].nbDims != kRanks[i])
        {
            why = std::string(kTensorNames[i]) + " has rank " + std::to_string(in[i].nbDims)
                + ", the contract declares " + std::to_string(kRanks[i]);
            return false;
        }
    }
    return true;
}

// Every tensor's dims against its shape expressions; -1 (not yet known) passes.
bool shapesMatch(Dims const* in, Dims const* out, int64_t const* e, std::string& why)
{
    int64_t want[nvinfer1::Dims::MAX_DIMS];
    for (int32_t pos = 0; pos < kNbInputs + kNbOutputs; ++pos)
    {
        Dims const& d = pos < kNbInputs ? in[pos] : out[pos - kNbInputs];
        bool ok = true;
        if (d.nbDims != kRanks[pos] || !expectedShape(pos, in, out, e, want, ok) || !ok)
        {
            why = std::string("cannot check ") + kTensorNames[pos] + " " + dimsText(d) + " against its shape";
            return false;
        }
        for (int32_t a = 0; a < d.nbDims; ++a)
        {
            if (d.d[a] >= 0 && static_cast<int64_t>(d.d[a]) != want[a])
            {
                why = std::string(kTensorNames[pos]) + " has dims " + dimsText(d) + " but its shape expression "
                    + std::to_string(a) + " gives " + std::to_string(want[a]);
                return false;
            }
        }
    }
    return true;
}

size_t workspaceFor(Dims const* in, int32_t nbInputs) noexcept
{
    try
    {
        std::string why;
        int64_t e[kNbExtents + 1] = {};
        if (!ranksMatch(in, nbInputs, why) || !computeExtents(in, e))
        {
            logError("getWorkspaceSize: " + (why.empty() ? std::string("cannot evaluate the extents") : why));
            return 0;
        }
        return workspaceBytes(e);
    }
    catch (...)
    {
        return 0;
    }
}

// enqueue: check what arrived against the contract, evaluate the extents, call the launcher.
int32_t run(nvinfer1::PluginTensorDesc const* inDesc, nvinfer1::PluginTensorDesc const* outDesc,
    void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept
{
    try
    {
        Dims in[kNbInputs];
        Dims out[kNbOutputs];
        for (int32_t i = 0; i < kNbInputs + kNbOutputs; ++i)
        {
            nvinfer1::PluginTensorDesc const& d = i < kNbInputs ? inDesc[i] : outDesc[i - kNbInputs];
            if (d.type != kTypes[i] || d.format != kFormats[i])
            {
                logError(std::string("enqueue: ") + kTensorNames[i] + " arrived in another type or format than the "
                    "contract declares");
                return 1;
            }
            (i < kNbInputs ? in[i] : out[i - kNbInputs]) = d.dims;
        }
        std::string why;
        int64_t e[kNbExtents + 1] = {};
        if (!ranksMatch(in, kNbInputs, why) || !computeExtents(in, e) || !shapesMatch(in, out, e, why))
        {
            logError("enqueue: " + (why.empty() ? std::string("cannot evaluate the extents") : why));
            return 1;
        }
        int const rc = @@LAUNCHER@@(inputs, outputs, e, workspace, stream);
        if (rc != 0)
        {
            std::string ext;
            for (int32_t i = 0; i < kNbExtents; ++i)
            {
                ext += (i ? ", " : "") + std::to_string(e[i]);
            }
            logError(std::string("launcher @@LAUNCHER@@ returned cudaError ") + std::to_string(rc) + " ("
                + cudaGetErrorString(static_cast<cudaError_t>(rc)) + ") for extents [" + ext + "]");
        }
        return rc;
    }
    catch (...)
    {
        logError("enqueue: out of memory");
        return 1;
    }
}
} // namespace ytk
} // namespace

// TensorRT calls this once when it loads the library (--dynamicPlugins, IPluginRegistry::loadLibrary).
extern "C" __attribute__((visibility("default"))) void setLoggerFinder(nvinfer1::ILoggerFinder* finder)
{
    std::lock_guard<std::mutex> lock(ytk::gLogMutex);
    ytk::gLoggerFinder = finder;
}
